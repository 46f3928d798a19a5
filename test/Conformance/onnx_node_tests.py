#!/usr/bin/python3
# ===- onnx_node_tests.py - ONNX backend node tests as conformance -------=== #
#
# Part of the Rondo project.
#
# ===--------------------------------------------------------------------=== #
"""Runs ONNX's own backend node tests for every op the importer claims.

For each ONNX op that the importer converts on data (its op table), the
matching single-node cases of libonnx-testdata (test_<op>*/model.onnx with
test_data_set_*/input_*.pb and output_*.pb) are imported with their static
shapes, executed on the CPU kernels with rondo-run, and compared with the
expected outputs. Every case is reported as passed, skipped with the reason,
or failed; none is dropped silently.

How a case is fed to the importer (the importer specialises a model to data;
it does not take arbitrary graph inputs):
- float graph inputs (FLOAT, FLOAT16, BFLOAT16) stay runtime arguments
  (tg.input), fed from .npy files;
- integer and boolean inputs that an op needs at compile time (Reshape's
  shape, Slice's starts/ends/axes/steps, Squeeze/Unsqueeze/ReduceSum axes,
  Split sizes, Expand's shape, Dropout's ratio and mode) become initializers
  holding the test data, as the exporter's graphs have them; so do constant
  Gather indices and Where's condition (the importer takes no boolean graph
  inputs; in the graphs it targets the condition is a mask). The indices of a Gather on a rank-2
  table along axis 0 (the embedding lookup the importer claims on token
  data) stay runtime int64 arguments.
- a case whose op has optional outputs the importer does not claim
  (LayerNormalization's Mean/InvStdDev, Dropout's mask) is checked on the
  outputs it claims; the table notes it.
- a model of an opset below 13 is re-stamped as opset 13 when the op's
  definition is the same in both (e.g. Sin-7 is Sin in opset 13); otherwise
  it is skipped.

Claims are checked statically first (dtypes, attributes, opset), so a claimed
case the importer rejects is a failure, not a skip. Conversely every case
judged outside the claims is still imported, and must be rejected with a
diagnostic: one the importer accepts fails (the claims below are stale, or
the importer takes what it cannot compute). The `_expanded` variants
of a claimed op's cases (function bodies written with other ops) are run
too and reported on their own rows; those that apply an op the importer does
not claim to data are skipped with the importer's reason. Ops with no node
test in ONNX 1.12 (Gelu is opset 20) and claimed forms the suite lacks (an
embedding Gather; opset-18 ReduceMean axes input and Split num_outputs) get
local cases with NumPy references, marked as such.

Outputs are compared at fp32 tolerance (rtol 1e-4, atol 1e-5) for FLOAT and
DOUBLE outputs (tg computes in fp32), at the precision of the expected type
for FLOAT16 (1e-3) and BFLOAT16 (1e-2) outputs, exactly for BOOL and
integers. Every case runs under each pipeline of --pipelines (default: none
and tg, so that both the importer's output and the canonicalised,
pattern-matched IR are checked).

Exit status 1 when a case fails, a claimed op has no passing case, or the
claimed op list below disagrees with the importer source.
"""

import argparse
import concurrent.futures
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

NODE_DIR = "/usr/share/libonnx-testdata/data/node"

BINARY = ["Add", "Sub", "Mul", "Div", "Pow", "Max", "Min"]
UNARY = ["Neg", "Exp", "Log", "Sqrt", "Reciprocal", "Sigmoid", "Tanh", "Relu",
         "Abs", "Sin", "Cos"]
# The ops the op table converts (kept in sync with the source by
# check_claims_against_source).
CLAIMED = BINARY + UNARY + [
    "Gelu", "Identity", "Dropout", "Cast", "MatMul", "Gemm", "Reshape",
    "Squeeze", "Unsqueeze", "Flatten", "Expand", "Transpose", "Slice", "Split",
    "Concat", "Gather", "Softmax", "ReduceMean", "ReduceSum",
    "LayerNormalization", "Where", "IsNaN", "Clip",
    # A mixture of experts' router, and its routed rows (GatherND of expert
    # matrices is claimed only with the MatMul that uses it: not a node test).
    "TopK", "GatherND"]
# Ops the op table converts only to reject them with a specific message.
RECOGNISED_UNSUPPORTED = {"NonZero", "ScatterND", "ScatterElements"}
# ReduceMax is converted only as the max shift before a Softmax (GPT-OSS's
# attention sinks); a ReduceMax of its own, as in the node tests, is refused.
RECOGNISED_UNSUPPORTED |= {"ReduceMax"}

# Inputs an op needs as compile-time constants: they become initializers.
CONST_OPERANDS = {
    "Reshape": {1}, "Squeeze": {1}, "Unsqueeze": {1}, "Expand": {1},
    "Slice": {1, 2, 3, 4}, "Split": {1}, "ReduceSum": {1}, "ReduceMean": {1},
    "Where": {0}, "Dropout": {1, 2}, "Gather": {1}, "Clip": {1, 2},
    "TopK": {1},
}
# Optional outputs the importer does not produce (checked without them).
UNCLAIMED_OUTPUTS = {"LayerNormalization": {1, 2}, "Dropout": {1}}

FLOAT_INPUTS = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16}
FLOAT_OUTPUTS = FLOAT_INPUTS | {TensorProto.DOUBLE}
INT_TYPES = {TensorProto.INT64, TensorProto.INT32}
TOLERANCE = {  # (rtol, atol) by expected element type
    TensorProto.FLOAT: (1e-4, 1e-5),
    TensorProto.DOUBLE: (1e-4, 1e-5),
    TensorProto.FLOAT16: (1e-3, 1e-5),
    TensorProto.BFLOAT16: (1e-2, 1e-5),
}
MIN_OPSET, MAX_OPSET = 13, 20


def type_name(t):
    return TensorProto.DataType.Name(t)


def check_claims_against_source(path):
    """Ops with a conversion function in the importer's op table (the rows
    `t.add("Op", fold, convert)` of compiler/Import/Ops/*.cpp whose convert is not
    nullptr) versus CLAIMED: a new or dropped op must show up here, not pass
    unnoticed."""
    sources = sorted(os.path.join(path, f) for f in os.listdir(path)
                     if f.endswith(".cpp"))
    if not sources:
        return ["cannot find the op families (*.cpp) in " + path]
    named = set()
    for source in sources:
        text = open(source).read()
        for op, convert in re.findall(
                r'\badd\(\s*"([A-Z][A-Za-z0-9]*)",\s*[\w:]+,\s*(\w+)', text):
            if convert != "nullptr":
                named.add(op)
    errors = []
    for op in sorted(named - set(CLAIMED) - RECOGNISED_UNSUPPORTED):
        errors.append("the importer converts %s but the suite does not list "
                      "it in CLAIMED" % op)
    for op in sorted(set(CLAIMED) - named):
        errors.append("CLAIMED lists %s but no row of the importer's op "
                      "table converts it" % op)
    return errors


# ===--------------------------------------------------------------------=== #
# Cases
# ===--------------------------------------------------------------------=== #


class Case:
    def __init__(self, name, op, model, datasets, expanded=False, local=None):
        self.name = name
        self.op = op
        self.model = model
        # [(inputs, outputs)], lists of numpy arrays in graph order.
        self.datasets = datasets
        self.expanded = expanded
        self.local = local  # why a local case exists, or None
        self.row = op + (" (expanded)" if expanded else "")


def to_array(proto, elem_type):
    a = numpy_helper.to_array(proto)
    if elem_type == TensorProto.BFLOAT16 and a.dtype == np.uint16:
        # ONNX 1.12 stores and returns bfloat16 data as its bit patterns
        # (the test data even labels them UINT16).
        a = (a.astype(np.uint32) << 16).view(np.float32)
    return a


def read_tensor(path):
    t = TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return t


def load_official(case_dir, op, expanded):
    model = onnx.load(os.path.join(case_dir, "model.onnx"))
    datasets = []
    for ds in sorted(d for d in os.listdir(case_dir)
                     if d.startswith("test_data_set_")):
        ds_dir = os.path.join(case_dir, ds)
        # Sequence and optional values (not tensors) are left as None: such
        # cases are skipped as outside the claims.
        def read(kind, k, vi):
            path = os.path.join(ds_dir, "%s_%d.pb" % (kind, k))
            if not vi.type.HasField("tensor_type") or not os.path.exists(path):
                return None
            return to_array(read_tensor(path), vi.type.tensor_type.elem_type)
        ins = [read("input", k, vi) for k, vi in enumerate(model.graph.input)]
        outs = [read("output", k, vi)
                for k, vi in enumerate(model.graph.output)]
        datasets.append((ins, outs))
    return Case(os.path.basename(case_dir), op, model, datasets, expanded)


def discover(node_dir):
    """Single-node cases of a claimed op, and the _expanded variants of
    those cases."""
    cases = []
    names = sorted(os.listdir(node_dir))
    base_op = {}
    for name in names:
        if name.endswith("_expanded"):
            continue
        path = os.path.join(node_dir, name, "model.onnx")
        if not os.path.exists(path):
            continue
        model = onnx.load(path, load_external_data=False)
        nodes = model.graph.node
        if len(nodes) == 1 and nodes[0].op_type in CLAIMED and \
                nodes[0].domain in ("", "ai.onnx"):
            base_op[name] = nodes[0].op_type
            cases.append(load_official(os.path.join(node_dir, name),
                                       nodes[0].op_type, False))
    for name in names:
        base = name[:-len("_expanded")]
        if name.endswith("_expanded") and base in base_op:
            cases.append(load_official(os.path.join(node_dir, name),
                                       base_op[base], True))
    return cases


def make_local_case(name, op, why, nodes, inputs, outputs, feeds, expected,
                    opset=20, initializers=()):
    graph = helper.make_graph(nodes, name, inputs, outputs,
                              initializer=list(initializers))
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return Case(name, op, model, [(feeds, expected)], local=why)


def local_cases():
    """Claimed forms with no ONNX 1.12 node test, with NumPy references."""
    rng = np.random.RandomState(0)
    x = rng.randn(3, 4, 5).astype(np.float32)
    f = TensorProto.FLOAT
    vi = helper.make_tensor_value_info
    erf = np.vectorize(math.erf)
    x64 = x.astype(np.float64)
    gelu_erf = 0.5 * x64 * (1 + erf(x64 / math.sqrt(2)))
    gelu_tanh = 0.5 * x64 * (1 + np.tanh(math.sqrt(2 / math.pi) *
                                         (x64 + 0.044715 * x64 ** 3)))
    cases = [
        make_local_case(
            "local_gelu", "Gelu", "Gelu is opset 20; ONNX 1.12 has no test",
            [helper.make_node("Gelu", ["x"], ["y"])],
            [vi("x", f, [3, 4, 5])], [vi("y", f, [3, 4, 5])], [x],
            [gelu_erf]),
        make_local_case(
            "local_gelu_tanh", "Gelu",
            "Gelu is opset 20; ONNX 1.12 has no test",
            [helper.make_node("Gelu", ["x"], ["y"], approximate="tanh")],
            [vi("x", f, [3, 4, 5])], [vi("y", f, [3, 4, 5])], [x],
            [gelu_tanh]),
    ]
    table = rng.randn(10, 4).astype(np.float32)
    ids = np.array([[0, 9, -1], [3, -10, 3]], dtype=np.int64)
    cases.append(make_local_case(
        "local_gather_embedding", "Gather",
        "the suite has no Gather on a rank-2 table with data indices",
        [helper.make_node("Gather", ["table", "ids"], ["y"], axis=0)],
        [vi("table", f, [10, 4]), vi("ids", TensorProto.INT64, [2, 3])],
        [vi("y", f, [2, 3, 4])], [table, ids], [table[ids]]))
    bias = rng.randn(4, 3).astype(np.float32)
    routed = np.array([[2], [0], [3], [2], [-1]], dtype=np.int64)
    cases.append(make_local_case(
        "local_gathernd_routed_rows", "GatherND",
        "the suite has no GatherND of rows by data ids (a routed expert bias)",
        [helper.make_node("GatherND", ["bias", "ids"], ["y"])],
        [vi("bias", f, [4, 3]), vi("ids", TensorProto.INT64, [5, 1])],
        [vi("y", f, [5, 3])], [bias, routed], [bias[routed[:, 0]]]))
    axes = np.array([-1, 0], dtype=np.int64)
    cases.append(make_local_case(
        "local_reduce_mean_opset18_axes_input", "ReduceMean",
        "opset 18 moved ReduceMean's axes to an input; ONNX 1.12 stops at 17",
        [helper.make_node("ReduceMean", ["x", "axes"], ["y"], keepdims=0)],
        [vi("x", f, [3, 4, 5]), vi("axes", TensorProto.INT64, [2])],
        [vi("y", f, [4])], [x, axes],
        [x64.mean(axis=(0, 2))], opset=18))
    y = rng.randn(2, 7).astype(np.float32)
    cases.append(make_local_case(
        "local_split_opset18_num_outputs", "Split",
        "opset 18 added Split's num_outputs; ONNX 1.12 stops at 17",
        [helper.make_node("Split", ["x"], ["a", "b", "c"], axis=1,
                          num_outputs=3)],
        [vi("x", f, [2, 7])],
        [vi("a", f, [2, 3]), vi("b", f, [2, 3]), vi("c", f, [2, 1])], [y],
        [y[:, 0:3], y[:, 3:6], y[:, 6:7]], opset=18))
    return cases


# ===--------------------------------------------------------------------=== #
# Claims
# ===--------------------------------------------------------------------=== #


class Plan:
    """How a claimed case is fed: which inputs become initializers, which
    outputs are dropped, the opset to stamp, and notes for the table."""

    def __init__(self):
        self.baked = set()
        self.pruned = set()
        self.opset = None
        self.notes = []


def opset_of(model):
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            return o.version
    return 0


def attrs_of(node):
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def plan_case(case):
    """A Plan, or the reason the case is outside the importer's claims."""
    model, op = case.model, case.op
    graph = model.graph
    plan = Plan()
    inputs0 = case.datasets[0][0] if case.datasets else []
    if not case.datasets:
        return "no test data set"

    opset = opset_of(model)
    if opset > MAX_OPSET:
        return "opset %d is newer than the importer's %d..%d" % (
            opset, MIN_OPSET, MAX_OPSET)
    if opset < MIN_OPSET:
        ops = {n.op_type for n in graph.node} if case.expanded else {op}
        for o in sorted(ops):
            try:
                old = onnx.defs.get_schema(o, opset).since_version
                new = onnx.defs.get_schema(o, MIN_OPSET).since_version
            except Exception:  # not defined at that opset
                return "opset %d predates the importer's %d..%d" % (
                    opset, MIN_OPSET, MAX_OPSET)
            if old != new:
                return ("opset %d predates the importer's %d..%d and %s "
                        "changed in opset %d" % (opset, MIN_OPSET, MAX_OPSET,
                                                 o, new))
        plan.opset = MIN_OPSET
        plan.notes.append("opset %d re-stamped as %d (%s unchanged)" % (
            opset, MIN_OPSET, ", ".join(sorted(ops))))

    for k, vi in enumerate(graph.input):
        if not vi.type.HasField("tensor_type"):
            return "input '%s' is a %s, not a tensor" % (
                vi.name, vi.type.WhichOneof("value"))
    if case.expanded:
        # Function bodies: data inputs must be floats; other claims are the
        # importer's to check node by node.
        for k, vi in enumerate(graph.input):
            t = vi.type.tensor_type.elem_type
            if t not in FLOAT_INPUTS:
                return "%s input '%s': the importer takes float data" % (
                    type_name(t), vi.name)
            if k < len(inputs0) and 0 in inputs0[k].shape:
                return "zero-sized input '%s'" % vi.name
        return plan

    node = graph.node[0]
    attrs = attrs_of(node)
    const_ops = CONST_OPERANDS.get(op, set())

    # The embedding form of Gather keeps its indices as data.
    if op == "Gather":
        rank = len(inputs0[0].shape)
        axis = attrs.get("axis", 0)
        if rank == 2 and axis in (0, -2):
            const_ops = set()
            plan.notes.append("indices fed as runtime int64 data")
        else:
            dim = inputs0[0].shape[axis]
            ids = [int(v) + (dim if v < 0 else 0)
                   for v in inputs0[1].reshape(-1)]
            step = ids[1] - ids[0] if len(ids) > 1 else 1
            arithmetic = bool(ids) and step != 0 and all(
                0 <= v < dim for v in ids) and all(
                    b - a == step for a, b in zip(ids, ids[1:]))
            if not arithmetic:
                return ("indices %s on axis %d of a rank-%d table: claimed are "
                        "embedding lookups (rank-2 table, axis 0) and constant "
                        "arithmetic index sequences" % (
                            inputs0[1].tolist(), axis, rank))
            plan.notes.append("constant indices (a strided slice)")
    if op == "GatherND":
        rank, ids = len(inputs0[0].shape), inputs0[1]
        if rank != 2 or ids.shape[-1] != 1 or attrs.get("batch_dims", 0):
            return ("data of rank %d, indices %s, batch_dims %d: claimed are "
                    "rows of a rank-2 table by ids [..., 1] (a routed bias)"
                    % (rank, list(ids.shape), attrs.get("batch_dims", 0)))
        plan.notes.append("indices fed as runtime int64 data")
    if op == "TopK":
        rank = len(inputs0[0].shape)
        if attrs.get("axis", -1) % rank != rank - 1 or \
                attrs.get("largest", 1) != 1:
            return "axis %d of %d, largest %d (claimed: the last, largest)" % (
                attrs.get("axis", -1), rank, attrs.get("largest", 1))

    for k, name in enumerate(node.input):
        if not name:
            continue
        vi = next(v for v in graph.input if v.name == name)
        t = vi.type.tensor_type.elem_type
        if k in const_ops:
            if t not in INT_TYPES | {TensorProto.BOOL} | FLOAT_INPUTS:
                return "%s operand '%s'" % (type_name(t), name)
            plan.baked.add(name)
            continue
        # Data sets are indexed by graph input: an optional node input left
        # empty (Clip's min) shifts the node's positions.
        data = inputs0[[v.name for v in graph.input].index(name)]
        if 0 in data.shape:
            return ("zero-sized input '%s': the importer specialises every "
                    "dimension to a positive size" % name)
        if op in ("Gather", "GatherND") and k == 1:
            if t not in INT_TYPES:
                return "%s indices" % type_name(t)
            continue
        if t == TensorProto.DOUBLE:
            return ("DOUBLE input '%s': the importer computes in fp32 and "
                    "takes FLOAT/FLOAT16/BFLOAT16 inputs" % name)
        if t not in FLOAT_INPUTS:
            return ("%s input '%s': %s is claimed on float data only" % (
                type_name(t), name, op))
    if plan.baked:
        plan.notes.append("constant operands: " + ", ".join(sorted(
            plan.baked)))

    for k, name in enumerate(node.output):
        if not name:
            continue
        if k in UNCLAIMED_OUTPUTS.get(op, set()):
            plan.pruned.add(name)
            continue
        vi = next(v for v in graph.output if v.name == name)
        t = vi.type.tensor_type.elem_type
        if t not in FLOAT_OUTPUTS and not (
                op == "IsNaN" and t == TensorProto.BOOL) and not (
                op == "TopK" and k == 1 and t == TensorProto.INT64):
            return "%s output '%s'" % (type_name(t), name)
    if plan.pruned:
        plan.notes.append("unclaimed outputs not checked: " + ", ".join(
            sorted(plan.pruned)))

    if op in ("Max", "Min") and len(node.input) != 2:
        return "variadic %s of %d inputs (claimed: exactly two)" % (
            op, len(node.input))
    if op == "Cast":
        to = attrs.get("to")
        if to not in FLOAT_OUTPUTS:
            return "cast to %s (claimed: between float types, which are " \
                "all fp32 here)" % type_name(to)
    if op == "Softmax":
        rank = len(inputs0[0].shape)
        axis = attrs.get("axis", -1)
        if axis % rank != rank - 1:
            return "softmax over axis %d of %d (claimed: the last)" % (
                axis, rank)
    if op == "LayerNormalization":
        rank = len(inputs0[0].shape)
        axis = attrs.get("axis", -1)
        if axis % rank != rank - 1:
            return ("normalisation over axes %d..%d (claimed: the last axis "
                    "only)" % (axis % rank, rank - 1))
    if op == "Dropout":
        mode = None
        if len(node.input) > 2 and node.input[2]:
            mode = bool(inputs0[2])
        if mode:
            return "training-mode dropout (random; not claimed)"
    return plan


def specialise(case, plan, inputs):
    """The model to import for one data set, and the runtime inputs."""
    model = onnx.ModelProto()
    model.CopyFrom(case.model)
    graph = model.graph
    runtime = []
    kept = []
    for vi, value in zip(list(graph.input), inputs):
        if vi.name in plan.baked:
            graph.initializer.append(numpy_helper.from_array(
                np.asarray(value), vi.name))
        else:
            kept.append(vi)
            runtime.append((vi.name, value))
    del graph.input[:]
    graph.input.extend(kept)
    if plan.pruned:
        for node in graph.node:
            for k, name in enumerate(node.output):
                if name in plan.pruned:
                    node.output[k] = ""
        outs = [o for o in graph.output if o.name not in plan.pruned]
        del graph.output[:]
        graph.output.extend(outs)
    if plan.opset is not None:
        for o in model.opset_import:
            if o.domain in ("", "ai.onnx"):
                o.version = plan.opset
    return model, runtime


# ===--------------------------------------------------------------------=== #
# Running and comparing
# ===--------------------------------------------------------------------=== #


def compare(name, got, want, elem_type):
    if got.shape != want.shape:
        return "%s: shape %s, expected %s" % (name, list(got.shape),
                                              list(want.shape))
    if want.dtype == np.bool_ or np.issubdtype(want.dtype, np.integer):
        if got.dtype.kind != want.dtype.kind and not (
                want.dtype == np.bool_ and got.dtype == np.bool_):
            return "%s: dtype %s, expected %s" % (name, got.dtype, want.dtype)
        bad = got != want
        if bad.any():
            k = np.argwhere(bad)[0]
            return "%s: element %s is %s, expected %s" % (
                name, k.tolist(), got[tuple(k)], want[tuple(k)])
        return None
    rtol, atol = TOLERANCE.get(elem_type, TOLERANCE[TensorProto.FLOAT])
    g = got.astype(np.float64)
    w = want.astype(np.float64)
    bad = ~np.isclose(g, w, rtol=rtol, atol=atol, equal_nan=True)
    if bad.any():
        err = np.where(bad, np.abs(g - w), 0)
        k = np.unravel_index(np.nanargmax(err) if not np.isnan(err).all()
                             else 0, err.shape)
        return "%s: %d of %d elements differ; worst at %s: %r, expected %r " \
            "(rtol %g, atol %g)" % (name, int(bad.sum()), bad.size, list(k),
                                    g[k], w[k], rtol, atol)
    return None


# An op refused on data: unsupported, only for data-independent values, or
# accepted only in one structure (ReduceMax as a softmax's max shift).
UNCLAIMED_OP_ERROR = re.compile(
    r"op '(\w+)'.*?(unsupported operator|only supported on data-independent"
    r"|is supported only as)")


def permissive_plan(case):
    """The feeding of plan_case without its claim checks: to confirm that a
    case judged outside the claims is rejected by the importer."""
    plan = Plan()
    node = case.model.graph.node[0]
    inputs0 = case.datasets[0][0]
    const_ops = set(CONST_OPERANDS.get(case.op, set()))
    if case.op == "Gather" and inputs0[0] is not None and \
            len(inputs0[0].shape) == 2 and \
            attrs_of(node).get("axis", 0) in (0, -2):
        const_ops = set()
    graph_inputs = [v.name for v in case.model.graph.input]
    for k, name in enumerate(node.input):
        if name and k in const_ops and \
                inputs0[graph_inputs.index(name)] is not None:
            plan.baked.add(name)
    for k, name in enumerate(node.output):
        if name and k in UNCLAIMED_OUTPUTS.get(case.op, set()):
            plan.pruned.add(name)
    return plan


def execute(case, plan, args, work, pipelines):
    """Runs every data set under each pipeline: None when all outputs
    match, else (stderr of a failed rondo-run or None, message)."""
    for d, (inputs, outputs) in enumerate(case.datasets):
        model, runtime = specialise(case, plan, inputs)
        case_dir = os.path.join(work, case.name, str(d))
        os.makedirs(case_dir, exist_ok=True)
        model_path = os.path.join(case_dir, "model.onnx")
        onnx.save(model, model_path)
        cmd = [args.rondo_run, model_path]
        for name, value in runtime:
            if value is None or np.asarray(value).dtype.kind not in "biuf":
                continue  # not numeric: the import rejects the case first
            path = os.path.join(case_dir, "in_%s.npy" % re.sub(
                r"[^\w.-]", "_", name))
            value = np.asarray(value)
            np.save(path, value.astype(np.float32)
                    if value.dtype.kind == "f" else value.astype(np.int64))
            cmd += ["--input", "%s=%s" % (name, path)]
        wanted = [(o.name, o.type.tensor_type.elem_type, want)
                  for o, want in zip(case.model.graph.output, outputs)
                  if o.name not in plan.pruned]
        for pipeline in pipelines:
            out_dir = os.path.join(case_dir, "out_" + pipeline)
            # A stale result of an earlier run must not pass for this one.
            shutil.rmtree(out_dir, ignore_errors=True)
            proc = subprocess.run(
                cmd + ["--pipeline=" + pipeline, "--output-dir", out_dir],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            if proc.returncode != 0:
                message = proc.stderr.strip()
                first = message.splitlines()[0] if message else \
                    "exit status %d" % proc.returncode
                return message, "[pipeline %s] %s" % (pipeline, first)
            for name, elem_type, want in wanted:
                path = os.path.join(out_dir, re.sub(r"[^\w.-]", "_", name) +
                                    ".npy")
                if not os.path.exists(path):
                    return None, "[pipeline %s] no output %s" % (pipeline,
                                                                name)
                if want is None:
                    continue
                problem = compare(name, np.load(path), want, elem_type)
                if problem:
                    return None, "[pipeline %s] %s" % (pipeline, problem)
    return None


def run_case(case, args, work):
    """('pass', notes) | ('skip', reason) | ('fail', message)."""
    pipelines = args.pipelines.split(",")
    plan = plan_case(case)
    if isinstance(plan, str):
        if case.expanded or not case.datasets:
            return "skip", plan
        # Outside the claims must mean rejected with a diagnostic, never a
        # silently accepted (and possibly wrong) import.
        outcome = execute(case, permissive_plan(case), args, work, ["none"])
        if outcome is None or outcome[0] is None or \
                "rondo-run: error:" not in outcome[0]:
            return "fail", ("judged outside the claims (%s), yet the importer "
                            "accepted it: %s" % (
                                plan, outcome[1] if outcome else "it passed"))
        return "skip", plan
    notes = list(plan.notes)
    if case.local:
        notes.insert(0, "local case: " + case.local)
    outcome = execute(case, plan, args, work, pipelines)
    if outcome is None:
        return "pass", "; ".join(notes)
    stderr, message = outcome
    m = UNCLAIMED_OP_ERROR.search(stderr or "")
    if case.expanded and m and m.group(1) not in CLAIMED:
        return "skip", "the expansion applies %s to data (not claimed)" % (
            m.group(1))
    return "fail", message


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rondo-run", required=True,
                        help="path of the rondo-run executable")
    parser.add_argument("--node-dir", default=NODE_DIR,
                        help="ONNX backend node tests (libonnx-testdata)")
    parser.add_argument("--importer-source",
                        help="compiler/Import/Ops, to check CLAIMED against it")
    parser.add_argument("--pipelines", default="none,tg",
                        help="comma-separated rondo-run pipelines to run")
    parser.add_argument("--work-dir", help="scratch directory (default: a "
                        "temporary one)")
    parser.add_argument("--filter", default="",
                        help="regex: run only matching case names")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="list passing cases too")
    args = parser.parse_args()

    errors = []
    if args.importer_source:
        errors = check_claims_against_source(args.importer_source)

    cases = discover(args.node_dir) + local_cases()
    if args.filter:
        cases = [c for c in cases if re.search(args.filter, c.name)]
    work = args.work_dir or tempfile.mkdtemp(prefix="rondo-conformance-")
    os.makedirs(work, exist_ok=True)
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as ex:
        outcomes = list(ex.map(lambda c: run_case(c, args, work), cases))

    rows = {}
    for op in CLAIMED:
        rows[op] = {"pass": [], "skip": [], "fail": []}
    for case, (status, detail) in zip(cases, outcomes):
        rows.setdefault(case.row, {"pass": [], "skip": [], "fail": []})
        rows[case.row][status].append((case.name, detail))

    print("ONNX backend node tests (%s) for the ops the importer claims" %
          args.node_dir)
    print("pipelines: %s; tolerance rtol/atol FLOAT,DOUBLE 1e-4/1e-5, "
          "FLOAT16 1e-3/1e-5, BFLOAT16 1e-2/1e-5" % args.pipelines)
    print()
    print("%-30s %6s %6s %6s" % ("op", "passed", "skipped", "failed"))
    order = [op for op in CLAIMED] + sorted(r for r in rows
                                            if r not in CLAIMED)
    total = {"pass": 0, "skip": 0, "fail": 0}
    for row in order:
        r = rows[row]
        if row not in CLAIMED and not any(r.values()):
            continue
        print("%-30s %6d %6d %6d" % (row, len(r["pass"]), len(r["skip"]),
                                     len(r["fail"])))
        for k in total:
            total[k] += len(r[k])
    print("%-30s %6d %6d %6d" % ("total", total["pass"], total["skip"],
                                 total["fail"]))

    def listing(title, status):
        entries = [(row, name, detail) for row in order
                   for name, detail in rows[row][status]]
        if entries:
            print()
            print(title)
            for row, name, detail in entries:
                print("  %-22s %-52s %s" % (row, name, detail))

    if args.verbose:
        listing("Passed cases (with notes):", "pass")
    listing("Skipped cases (outside the importer's claims):", "skip")
    listing("Failed cases:", "fail")

    for op in CLAIMED:
        if not rows[op]["pass"]:
            errors.append("claimed op %s has no passing case" % op)
    if errors:
        print()
        for e in errors:
            print("error: " + e)
    print()
    print("passed: %d, skipped: %d, failed: %d" % (
        total["pass"], total["skip"], total["fail"]))
    return 1 if total["fail"] or errors else 0


if __name__ == "__main__":
    sys.exit(main())
