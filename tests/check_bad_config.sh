#!/usr/bin/env bash
# Settings that must not survive, or decide, a run (issue 35, items 4-7):
#  (4) resuming takes no output path from the checkpoint's stored run config:
#      its trace, metrics, log file and report are written only where the
#      command line (or --config) says;
#  (5) any string round-trips through the YAML config exactly (newlines, a
#      leading tab, quotes, YAML's special words and characters, non-ASCII;
#      a path with a newline trains and resumes); a name that is not UTF-8,
#      a float flag beyond the 32-bit float range, a duplicate YAML key or
#      section, a second YAML document (ignored before), --micro-batch -1 / 0
#      and --pp-chunks 0 are one error line;
#  (6) SIGTERM sent every 10 ms from the start of the final save, and from
#      step 1 on (the first stops the run, the others reach the steps, the
#      stop's save and the exit), until the process ends: exit 0, the usual
#      lines, a checkpoint that verifies;
#  (7) sizes that cannot fit in memory are refused at once with one line
#      giving the bytes needed and the machine's.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
one_thread
M=$(realpath "$M")
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
one_error() { # WANT COMMAND...: non-zero exit within 20 s, exactly one stderr line containing WANT, no MPI abort
    local want=$1; shift
    timeout 20 "$@" >"$W/out" 2>"$W/err"
    local rc=$?
    if [ $rc -ne 0 ] && [ $rc -lt 124 ] && [ "$(wc -l <"$W/err")" = 1 ] && grep -qF -- "$want" "$W/err" &&
        ! grep -q MPI_ABORT "$W/err"; then
        echo "ok   $(cut -c1-200 "$W/err")"
    else
        fail "$* -> exit $rc (want one line with '$want'): $(head -c 400 "$W/err")"
    fi
}
printf 'hello world, this is a tiny corpus for the configuration tests.\n%.0s' {1..200} >$W/text.txt
$M tokenize --tokenizer byte --out $W/d $W/text.txt >/dev/null || { echo "FAIL: tokenize"; exit 1; }
D="--train $W/d_train.bin --layers 1 --dim 16 --heads 2 --seq-len 8 --batch 2 --log-every 0"

echo "== (4) resume: output paths come from the command line, not the checkpoint =="
mkdir $W/o
$M train $D --steps 1 --ckpt-dir $W/r4 --trace $W/o/trace.json --metrics $W/o/m.jsonl --log-file $W/o/log.txt \
    --report-json $W/o/rep.json >/dev/null || fail "the first run"
grep -q "^  trace: $W/o/trace.json$" $W/r4/config-000001.yaml || fail "the stored config does not keep the trace path"
rm -f $W/o/*
$M train --resume $W/r4 --steps 2 >$W/r4.out 2>&1 || fail "resume: $(cat $W/r4.out)"
[ -z "$(ls $W/o)" ] && echo "ok   the resumed run wrote nothing where the checkpoint's config said" ||
    fail "the resumed run wrote the stored config's outputs: $(ls $W/o)"
grep -q "its output paths (metrics, log-file, trace, report-json) are not used" $W/r4.out || fail "no note: $(cat $W/r4.out)"
printf 'logging:\n  report-json: %s\n' "$W/conf_rep.json" >$W/out.yaml
$M train --resume $W/r4 --steps 3 --metrics $W/mine.jsonl --config $W/out.yaml >/dev/null || fail "resume with outputs"
[ "$(grep -c '"loss"' $W/mine.jsonl 2>/dev/null)" = 1 ] && [ -s $W/conf_rep.json ] &&
    echo "ok   --metrics on the command line and report-json from --config are written on resume" ||
    fail "the outputs given on resume were not written"

echo "== (5) strings round-trip through the YAML config exactly =="
# Five names a run: two inputs that exist under that exact name only (train, val) and three outputs
# (metrics, log-file, report-json) that must appear under it, all through --print-config's YAML read
# back by --config; the checkpoint's stored copy must be that YAML again.
names=($'\tlead' $'trail\t' ' lead' 'trail ' $'a\nb' $'cr\r\nlf' '#x' 'a: b' 'a #b' '"q"' "'s'" 'b\s' 'null' '~'
       'true' '-dash' '? q' '[x]' '&a' '|' 'é ß𝄞' $'\xc2\x85nel' $'\xe2\x80\xa8ls' $'\xef\xbb\xbfbom' $'\x01\x7f\x1b[0m')
mkdir $W/n && cd $W/n || exit 1
rt=0
for ((i = 0; i < ${#names[@]}; i += 5)); do
    g=("${names[@]:i:5}")
    cp -- $W/d_train.bin "${g[0]}" && cp -- $W/d_val.bin "${g[1]}" || exit 1
    $M train $D --train "${g[0]}" --val "${g[1]}" --eval-every 1 --eval-batches 1 --metrics "${g[2]}" \
        --log-file "${g[3]}" --report-json "${g[4]}" --steps 1 --ckpt-dir ck --print-config >p1.yaml 2>e.txt &&
        $M train --config p1.yaml >/dev/null 2>>e.txt
    rc=$?
    if [ $rc = 0 ] && [ -s "${g[2]}" ] && [ -s "${g[3]}" ] && [ -s "${g[4]}" ] &&
        diff <(tail -n +2 ck/config-000001.yaml) <(tail -n +2 p1.yaml | grep -v '^  \(resume\|allow-schedule-change\|init-from\):') >/dev/null; then
        rt=$((rt + ${#g[@]}))
    else
        fail "names $(printf '%q ' "${g[@]}")do not round-trip (exit $rc): $(grep '^  \(train\|val\|metrics\|log-file\|report-json\):' p1.yaml | tr '\n' ' ') $(head -c 300 e.txt)"
    fi
    rm -rf -- "${g[@]}" ck
done
cd - >/dev/null || exit 1
echo "ok   $rt of ${#names[@]} names read and written exactly through --print-config, --config and the stored config"
# the issue's cases: a path with a newline trains and resumes; a leading tab is kept (relative path)
cp $W/d_train.bin $W/$'new\nline.bin'
$M train $D --train $W/$'new\nline.bin' --steps 1 --ckpt-dir $W/nl >/dev/null 2>$W/err || fail "newline path: $(cat $W/err)"
$M train --resume $W/nl --steps 2 >/dev/null 2>$W/err && echo "ok   a path with a newline resumes" ||
    fail "resume with a newline path: $(cat $W/err)"
(cd $W && cp d_train.bin $'\ttab.bin' && $M train $D --train $'\ttab.bin' --steps 1 --ckpt-dir tab >/dev/null 2>err &&
    $M train --resume tab --steps 2 >/dev/null 2>>err) && echo "ok   a path with a leading tab resumes" ||
    fail "leading tab: $(cat $W/err)"
cp $W/d_train.bin $W/$'latin\xe9.bin'
one_error "is not UTF-8 text" $M train $D --train $W/$'latin\xe9.bin' --steps 1 --ckpt-dir $W/latin
[ -e $W/latin ] && fail "the refused run left $W/latin"
for f in timeout loss-scale bucket-mb offload-buffer-mb; do
    one_error "--$f is not finite as a 32-bit float, the type that holds it (got 1e39" $M train $D --steps 1 --$f 1e39
done
one_error "--timeout is 0 as a 32-bit float, the type that holds it (got 1e-50" $M train $D --steps 1 --timeout 1e-50
one_error "--micro-batch must be >= 1, got -1" $M train $D --steps 1 --micro-batch -1
one_error "--micro-batch must be >= 1, got 0" $M train $D --steps 1 --micro-batch 0
one_error "--pp-chunks must be >= 1, got 0" $M train $D --steps 1 --pp-chunks 0
printf 'model:\n  layers: 1\n  dim: 16\n  layers: 2\n' >$W/dup.yaml
one_error "dup.yaml line 4: key 'layers' is given twice in section 'model' (also line 2)" $M train $D --config $W/dup.yaml
printf 'optimizer: {lr: 1e-3, lr: 2e-3}\n' >$W/dup.yaml
one_error "dup.yaml line 1: key 'lr' is given twice in section 'optimizer'" $M train $D --config $W/dup.yaml
printf 'model:\n  layers: 1\noptimizer:\n  lr: 1e-3\nmodel:\n  dim: 16\n' >$W/dup.yaml
one_error "dup.yaml line 5: section 'model' is given twice (also line 1)" $M train $D --config $W/dup.yaml
printf 'optimizer:\n  lr: "1e-3\\0"\n' >$W/nul.yaml
one_error "nul.yaml line 2: the value of key 'lr' holds a NUL character" $M train $D --config $W/nul.yaml
printf 'schedule: {steps: 2}\n---\nschedule: {steps: 3}\n' >$W/two.yaml
one_error "two.yaml line 2: a second YAML document" $M train $D --config $W/two.yaml
printf 'schedule: {steps: 2}\n---\n: : [ {\n' >$W/two.yaml
one_error "two.yaml line 3: not valid YAML" $M train $D --config $W/two.yaml
printf -- '---\nschedule: {steps: 2}\n...\n# the end\n' >$W/one.yaml
# (the output is taken whole first: grep -q leaving early would kill the writer with SIGPIPE, which pipefail counts)
$M train --config $W/one.yaml --print-config > $W/one.out && grep -qx '  steps: 2' $W/one.out && echo "ok   one document between --- and ... reads" ||
    fail "a single document between --- and ... is not read"

echo "== (6) SIGTERM during a save =="
# a model whose checkpoint (300 MB) takes a good fraction of a second to write
BIG="--train $W/d_train.bin --layers 8 --dim 512 --heads 8 --seq-len 32 --batch 2 --ckpt-every 100000"
term_until_exit() { # PID: SIGTERM every 10 ms until it has exited (a zombie: not yet reaped, so the pid is not reused)
    local n=0 st
    while read -r _ _ st _ 2>/dev/null <"/proc/$1/stat" && [ "$st" != Z ] && kill -TERM "$1" 2>/dev/null; do
        n=$((n + 1)); sleep 0.01
    done
    echo $n
}
# the final save: the signals start once its first temporary file exists
$M train $BIG --steps 1 --ckpt-dir $W/fs >$W/fs.out 2>&1 &
pid=$!
until compgen -G "$W/fs/*.tmp" >/dev/null || ! kill -0 $pid 2>/dev/null; do sleep 0.002; done
sent=$(term_until_exit $pid)
wait $pid
rc=$?
if [ $rc = 0 ] && [ "$sent" -ge 3 ] && grep -q "^step     1 | checkpoint saved to $W/fs" $W/fs.out &&
    $M ckpt verify $W/fs >/dev/null 2>&1; then
    echo "ok   $sent SIGTERMs during the final save: exit 0, the save line, the checkpoint verifies"
else
    fail "SIGTERM during the final save: exit $rc after $sent signals; $(tail -n 3 $W/fs.out)"
fi
# a stop: the first signal ends the run at the step boundary, the others arrive during its save
OMP_NUM_THREADS=2 $M train $BIG --steps 100000 --metrics $W/st.jsonl --ckpt-dir $W/st >$W/st.out 2>&1 & # the team's threads too
pid=$!
until [ -s $W/st.jsonl ] || ! kill -0 $pid 2>/dev/null; do sleep 0.01; done
sent=$(term_until_exit $pid)
wait $pid
rc=$?
if [ $rc = 0 ] && [ "$sent" -ge 3 ] &&
    grep -q "^stopped by a signal after step [0-9]*: checkpoint saved in $W/st (continue with --resume)" $W/st.out &&
    $M ckpt verify $W/st >/dev/null 2>&1; then
    echo "ok   $sent SIGTERMs, the later ones during the stop's save: exit 0, $(grep '^stopped' $W/st.out | cut -c1-40)..., verifies"
else
    fail "SIGTERM during a stop's save: exit $rc after $sent signals; $(tail -n 3 $W/st.out)"
fi
rm -rf $W/fs $W/st

echo "== (7) sizes that cannot fit in memory: refused at once =="
S="--train $W/d_train.bin --heads 2 --seq-len 8 --steps 1 --log-every 0"
WANT="of memory on this machine"
one_error "$WANT" $M train $S --layers 4095 --dim 65536
one_error "$WANT" $M train $S --layers 1 --dim 8192 --vocab 16777216 --batch 2
one_error "$WANT" $M train $S --layers 1 --dim 16 --batch 2000000000
one_error "$WANT (2 ranks of" mpirun -q -np 2 $M train $S --layers 4095 --dim 65536 --dp 2 --batch 2
grep -q "which has [0-9]* (" $W/err || fail "the line does not give the machine's bytes: $(cat $W/err)"

[ $fails = 0 ] && echo "all bad-config checks passed" || { echo "$fails failed"; exit 1; }
