"""--self-check's checks of bench/w1.py's pure-Python parts: how a step's rows
split over data-parallel ranks, the GPU lists, and the shapes' parameter
counts and FLOPs against scripts/export-hf-onnx.py's presets."""
import importlib
import os

from w1 import (FLOP_PER_TOKEN, QWEN3_8B, SHAPES, decoder_matmul_params,
                flop_per_token, parse_gpu_lists, rank_rows)


def check_rank_rows():
    """self_check's pure-Python part: for each shape's rows per step (16 for
    W1, 8 for Qwen3-8B), every rank count that divides them and every
    --torch-rows, rank_rows gives the ranks equal shares that cover the rows
    of a step once, in chunks that divide them and are at most --torch-rows,
    every row weighing 1/rows of the gradient as on one GPU; one rank is the
    one-GPU split; parse_gpu_lists takes the lists it should."""
    from fractions import Fraction
    bad = []
    for step_rows in sorted({s["rows"] for s in SHAPES.values()} | {16}):
        divisors = [d for d in (1, 2, 4, 8, 16) if step_rows % d == 0]
        for world in divisors:
            for torch_rows in divisors:
                shares = [rank_rows(world, r, torch_rows, step_rows)
                          for r in range(world)]
                rows = sorted(i for first, count, _, _ in shares
                              for i in range(first, first + count))
                good = (rows == list(range(step_rows))
                        and len({s[1:] for s in shares}) == 1
                        and all(per * chunks == count and per <= torch_rows
                                for _, count, per, chunks in shares)
                        and {Fraction(1, world * chunks * per)
                             for _, _, per, chunks in shares}
                        == {Fraction(1, step_rows)})
                if not good:
                    bad.append("%d rows, %d ranks, --torch-rows %d: %s" % (
                        step_rows, world, torch_rows, shares))
    # One rank: the one-GPU variants' 16 / --torch-rows chunks.
    if rank_rows(1, 0, 2) != (0, 16, 2, 8) or rank_rows(4, 3, 2) != (12, 4, 2, 2):
        bad.append("rank_rows(1, 0, 2) %s, rank_rows(4, 3, 2) %s" % (
            rank_rows(1, 0, 2), rank_rows(4, 3, 2)))
    # Qwen3-8B's 8 rows (--torch-rows 2): 1 GPU 4 chunks of 2; 2 GPUs 4 rows
    # each, 2 chunks of 2; 4 GPUs 2 rows each, one chunk.
    expect = {(1, 0): (0, 8, 2, 4), (2, 0): (0, 4, 2, 2), (2, 1): (4, 4, 2, 2),
              (4, 0): (0, 2, 2, 1), (4, 3): (6, 2, 2, 1)}
    for (world, rank), want in expect.items():
        if rank_rows(world, rank, 2, 8) != want:
            bad.append("rank_rows(%d, %d, 2, 8) %s, not %s" % (
                world, rank, rank_rows(world, rank, 2, 8), want))
    for world, torch_rows, step_rows in ((0, 2, 16), (3, 2, 16), (32, 2, 16),
                                         (2, 3, 16), (2, 0, 16), (16, 2, 8),
                                         (2, 16, 8), (3, 2, 8)):
        try:
            rank_rows(world, 0, torch_rows, step_rows)
            bad.append("rank_rows(%d, 0, %d, %d) accepted" % (world, torch_rows, step_rows))
        except ValueError:
            pass
    if parse_gpu_lists(["0", " 0, 1", "4,5,6,7"]) != [["0"], ["0", "1"], ["4", "5", "6", "7"]]:
        bad.append("parse_gpu_lists of 0 / 0,1 / 4,5,6,7")
    if parse_gpu_lists(["0,1", "0,1,2,3"], 8) != [["0", "1"], ["0", "1", "2", "3"]]:
        bad.append("parse_gpu_lists of 0,1 / 0,1,2,3 for 8 rows")
    for texts, step_rows in ((["0,0"], 16), (["0,1,2"], 16), ([""], 16),
                             (["0,1", "2,3"], 16), (["0,1,2,3,4,5"], 8),
                             ([",".join(map(str, range(16)))], 8)):
        try:
            parse_gpu_lists(texts, step_rows)
            bad.append("--pytorch-gpus %s accepted for %d rows" % (texts, step_rows))
        except ValueError:
            pass
    print("data-parallel split (rank_rows, parse_gpu_lists): %s" % (
        "ok" if not bad else "FAIL: " + "; ".join(bad)))
    return not bad


def check_shapes():
    """self_check's pure-Python part on --shape: W1's FLOP per token is
    anchors.md's (FLOP_PER_TOKEN); each shape's N is its configuration's
    decoder matmul weights within 0.5%; tokens per step; the configurations
    are scripts/export-hf-onnx.py's presets (the graphs the trainers are
    compiled from) where that script is here."""
    bad = []
    if flop_per_token("w1") != FLOP_PER_TOKEN:
        bad.append("w1: %g FLOP per token, not anchors.md's %g" % (
            flop_per_token("w1"), FLOP_PER_TOKEN))
    for name, s in sorted(SHAPES.items()):
        n = decoder_matmul_params(s["config"])
        if abs(n - s["matmul_params"]) > 0.005 * n:
            bad.append("%s: N %g, its configuration's %d" % (name, s["matmul_params"], n))
    tokens = {name: s["rows"] * s["seq"] for name, s in SHAPES.items()}
    # The Llama and Qwen2.5 shapes where scripts/export-hf-onnx.py is here
    # (w1.family_presets): W1's 16 x 4096.
    want = {"w1": 65536, "qwen3-8b": 32768}
    want.update({name: 65536 for name in ("llama3.2-1b", "qwen2.5-1.5b") if name in SHAPES})
    if tokens != want:
        bad.append("tokens per step %s" % tokens)
    c = QWEN3_8B
    if (c["hidden_size"], c["num_hidden_layers"], c["num_attention_heads"],
            c["num_key_value_heads"], c["head_dim"], c["intermediate_size"],
            c["vocab_size"], c["rms_norm_eps"], c["rope_theta"],
            c["tie_word_embeddings"]) != (4096, 36, 32, 8, 128, 12288, 151936,
                                          1e-6, 1e6, False):
        bad.append("QWEN3_8B %s" % c)
    # 6 x 6.95e9 + 12 x 36 x 32 x 128 x 4096 = 48.95 GFLOP per token.
    if abs(flop_per_token("qwen3-8b") - 48.948e9) > 0.01e9:
        bad.append("qwen3-8b: %g FLOP per token" % flop_per_token("qwen3-8b"))
    # Llama-3.2-1B: N = 16 x (2048 x 5120 + 3 x 2048 x 8192) = 0.973e9 (its
    # 1.24B parameters less the 0.263e9 of the tied embedding), head_dim 64;
    # 6 N + 12 x 16 x 32 x 64 x 4096 = 7.449 GFLOP per token. Qwen2.5-1.5B:
    # head_dim 1536 / 12 = 128, N = 28 x (1536 x 3584 + 3 x 1536 x 8960) =
    # 1.310e9 (its model card's 1.31B non-embedding parameters); 6 N + 12 x
    # 28 x 12 x 128 x 4096 = 9.975 GFLOP per token.
    for name, n, flop in (("llama3.2-1b", 973078528, 7.449e9),
                          ("qwen2.5-1.5b", 1310195712, 9.975e9)):
        if name not in SHAPES:
            continue
        if SHAPES[name]["matmul_params"] != n or abs(flop_per_token(name) - flop) > 0.001e9:
            bad.append("%s: N %g, %g FLOP per token" % (
                name, SHAPES[name]["matmul_params"], flop_per_token(name)))
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                          "scripts", "export-hf-onnx.py")
    compared = ""
    if os.path.exists(script):
        import importlib.util
        spec = importlib.util.spec_from_file_location("export_hf_onnx", script)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        for name, preset in (("w1", "qwen3-1.7b"), ("qwen3-8b", "qwen3-8b")):
            fields = dict(module.QWEN3_COMMON, **module.PRESETS[preset])
            fields.pop("model_type", None)
            if fields != SHAPES[name]["config"]:
                bad.append("%s: not export-hf-onnx.py's %s: %s" % (name, preset, fields))
        for name in ("llama3.2-1b", "qwen2.5-1.5b"):
            if SHAPES.get(name, {}).get("config") != module.FAMILY_PRESETS.get(name):
                bad.append("%s: not export-hf-onnx.py's preset of that name" % name)
        compared = ", scripts/export-hf-onnx.py's presets"
    print("shapes (N, FLOP per token, tokens per step%s): %s" % (
        compared, "ok" if not bad else "FAIL: " + "; ".join(bad)))
    return not bad
