#!/usr/bin/env bash
# The CLI rejects bad flags and bad input files with a one-line error that
# names the problem (and a non-zero exit), never a crash or a hang.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
expect_error() { # expect_error "words" command...
    local words=$1; shift
    if timeout 60 "$@" >"$W/out" 2>"$W/err"; then
        echo "FAIL (exit 0): $*"; fails=$((fails+1)); return
    fi
    local rc=$?
    if [ $rc -ge 124 ]; then echo "FAIL (crash/timeout rc=$rc): $*"; cat "$W/err"; fails=$((fails+1)); return; fi
    if ! grep -q -- "$words" "$W/err"; then
        echo "FAIL (message lacks '$words'): $*"; cat "$W/err"; fails=$((fails+1)); return
    fi
    echo "ok: $(grep -m1 -- "$words" "$W/err")"
}
printf 'hello world, this is a tiny corpus for the error tests.\n%.0s' {1..40} > $W/text.txt
$M tokenize --tokenizer byte --out $W/d $W/text.txt >/dev/null
D="--train $W/d_train.bin --layers 1 --dim 16 --heads 2 --seq-len 8 --batch 2"

expect_error "unknown command" $M frobnicate
expect_error "unknown flag '--lrr'" $M train $D --lrr 1
expect_error "needs a value" $M train $D --lr
expect_error "expects an integer, got 'ten'" $M train $D --steps ten
expect_error "expects a number, got 'fast'" $M train $D --lr fast
expect_error "--train FILE is required" $M train --steps 1
expect_error "not divisible by --heads" $M train $D --dim 18 --heads 4
expect_error "not a multiple of --micro-batch" $M train $D --batch 6 --micro-batch 4
expect_error "unknown --optimizer 'lion'" $M train $D --optimizer lion
expect_error "--adafactor-beta1 applies to --optimizer adafactor" $M train $D --adafactor-beta1 0.9
expect_error "--adafactor-beta1 must be in \[0, 1)" $M train $D --optimizer adafactor --adafactor-beta1 1
expect_error "--adafactor-clip must be a positive number, got -1" $M train $D --optimizer adafactor --adafactor-clip -1
expect_error "--adafactor-scale-parameter and --adafactor-clip apply to --optimizer adafactor" $M train $D --adafactor-scale-parameter
expect_error "--adafactor-scale-parameter and --adafactor-clip apply to --optimizer adafactor" $M train $D --adafactor-clip 2
expect_error "unknown --lr-schedule" $M train $D --lr-schedule step
expect_error "unknown --data-order" $M train $D --data-order random
expect_error "--dropout must be in" $M train $D --dropout 1.5
expect_error "unknown model preset" $M train $D --model gpt5
expect_error "--resume needs --ckpt-dir" $M train $D --resume
expect_error "outside the model vocabulary" $M train $D --vocab 64
expect_error "fewer than one" $M train --train $W/d_val.bin --layers 1 --dim 16 --heads 2 --seq-len 1000 --batch 2
# files: missing, truncated, oversized, wrong kind
expect_error "nosuch.bin" $M train --train $W/nosuch.bin
head -c 1500 $W/d_train.bin > $W/trunc.bin
expect_error "trunc.bin" $M train --train $W/trunc.bin --layers 1 --dim 16 --heads 2 --seq-len 8 --vocab 256
cat $W/d_train.bin <(printf 'xx') > $W/big.bin
expect_error "big.bin" $M train --train $W/big.bin --layers 1 --dim 16 --heads 2 --seq-len 8 --vocab 256
expect_error "checkpoint" $M eval --ckpt $W/nockpt --val $W/d_val.bin
$M train $D --steps 1 --ckpt-dir $W/ck --log-every 0 >/dev/null
echo '{"format":"meshtrain-checkpoint","version":1' > $W/ck/manifest.json
expect_error "manifest" $M eval --ckpt $W/ck --val $W/d_val.bin
expect_error "--tokenizer" $M tokenize --out $W/x $W/text.txt
expect_error "val-fraction" $M tokenize --tokenizer byte --val-fraction 2 --out $W/x $W/text.txt
expect_error "--format" $M export --ckpt $W/ck --format onnx --out $W/x
printf 'garbage' > $W/bad.safetensors
expect_error "bad.safetensors" $M import --format safetensors --in $W/bad.safetensors --heads 2 --out $W/imp
echo
[ $fails -eq 0 ] && echo "all CLI error cases rejected with their messages" || { echo "$fails case(s) failed"; exit 1; }
