#!/usr/bin/env bash
# `make asan`: the C unit tests and the short scripted tests against the
# AddressSanitizer + UndefinedBehaviorSanitizer build in build-asan/ (any
# report fails the test: UBSan does not recover, LSan exits non-zero).
# LeakSanitizer ignores the allocations Open MPI, oneDNN, libgomp and the
# UBSan runtime keep until exit (tests/asan/lsan.supp, with reasons); Open MPI
# keeps its components loaded so those stacks can be matched by library.
set -euo pipefail
cd "$(dirname "$0")/../.."
export MT_BUILD=${MT_BUILD:-build-asan}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:detect_stack_use_after_return=0}
export LSAN_OPTIONS=suppressions=$PWD/tests/asan/lsan.supp:fast_unwind_on_malloc=0:print_suppressions=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export OMPI_MCA_mca_base_component_disable_dlclose=1
# the scripted tests with 1-4 ranks and tiny models that cover the parsers,
# checkpoints, error paths and the parallel layouts in a few minutes
export MT_ONLY_CHECKS="check_cli_errors check_ckpt_integrity check_ckpt_reshard check_robustness check_node_bytes"
MT_ONLY_CHECKS+=" check_zeropp_hpz check_zeropp_quant check_offload_train check_lean_optim check_vocab_padding"
MT_ONLY_CHECKS+=" check_bad_data" # hostile shards and tokenizer.json files
MT_ONLY_CHECKS+=" check_lora_parity check_ia3 check_peft_memory check_bnb_export" # PEFT: adapters, quantized bases, peft files
bash tests/run_all.sh
