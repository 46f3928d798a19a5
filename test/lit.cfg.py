# -*- Python -*-
import os

import lit.formats
from lit.llvm import llvm_config
from lit.llvm.subst import ToolSubst

config.name = "Rondo"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".onnxtxt", ".test"]
config.excludes = ["Inputs", "CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py", "data"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.rondo_obj_root, "test")

llvm_config.use_default_substitutions()
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)

config.substitutions.append(("%models", os.path.join(config.rondo_src_root, "test", "data", "models")))
config.substitutions.append(("%python", config.python_executable))
config.substitutions.append(("%check_reference",
                             config.python_executable + " " +
                             os.path.join(config.rondo_src_root, "test", "E2E", "check_reference.py")))

# `--device=host` describes the machine it runs on (calibrated or
# detected); the tests plan against one fixed reference host, a 16-core
# machine, so that their plans and numbers do not depend on the machine.
# test/Driver/host-calibration.test checks the machine's own spec.
config.environment["RONDO_HOST_SPEC"] = os.path.join(
    config.rondo_src_root, "test", "data", "host-reference.json")

tools = ["rondo-opt", "rondo-translate", "rondo-compile", "rondo-run",
         "rondo-calibrate-host"]
llvm_config.add_tool_substitutions([ToolSubst(t, unresolved="ignore") for t in tools],
                                   [config.rondo_tools_dir, config.llvm_tools_dir])

if os.path.isdir("/usr/share/libonnx-testdata/data/node"):
    config.available_features.add("onnx-testdata")

# Trainers built with MPI and an mpirun to start them (test/E2E/replicas.test).
import shutil
if config.rondo_enable_mpi.upper() in ("ON", "TRUE", "1", "YES") and shutil.which("mpirun"):
    config.available_features.add("mpi")
    # As root Open MPI wants --allow-run-as-root; more ranks than cores,
    # --oversubscribe; in containers the shared-memory transport without
    # cross-memory attach.
    mpirun = ("mpirun --allow-run-as-root --oversubscribe --bind-to none "
              "--mca btl self,vader --mca btl_vader_single_copy_mechanism none")
    # The sanitizer suite (scripts/sanitize.sh): Open MPI unloads its
    # plugins at MPI_Finalize, so LeakSanitizer can neither name nor suppress
    # what they keep; address and UB checks stay on, leak checks go off for
    # the replicas mpirun starts.
    # %mpi_env: the same for a trainer that starts MPI alone (a singleton).
    mpi_env = "env"
    if "ASAN_OPTIONS" in os.environ:
        no_leaks = os.environ["ASAN_OPTIONS"] + ":detect_leaks=0"
        mpirun += " -x ASAN_OPTIONS=" + no_leaks
        mpi_env = "env ASAN_OPTIONS=" + no_leaks
    config.substitutions.append(("%mpirun", mpirun))
    config.substitutions.append(("%mpi_env", mpi_env))
