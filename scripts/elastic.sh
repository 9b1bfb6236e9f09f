#!/usr/bin/env bash
# Elastic restart (docs/usage.md "Elastic restart"): runs a training job under
# mpirun and, when a host or rank dies, restarts it on the ranks still
# available with the layout `meshtrain plan` ranks first for them, resuming
# from the newest complete checkpoint (any layout loads any checkpoint).
#
#   scripts/elastic.sh (--hosts "a:2 b:2" | --np N) --ckpt-dir DIR --ckpt-every K
#                      [--max-restarts R] [--lost-file FILE] [--probe CMD]
#                      [--plan-flags "FLAGS"] -- TRAIN FLAGS...
#
# Every launch is
#   $MPIRUN -np M $MESHTRAIN train TRAIN FLAGS [layout flags] --ckpt-dir DIR --ckpt-every K --resume auto
# The first launch keeps the layout TRAIN FLAGS give (plan chooses one when
# they give none); a restart drops their layout flags (--dp --tp --pp --zero
# --shard-group --micro-batch --recompute --sequence-parallel --pp-schedule
# --pp-chunks --pp-layers --zeropp-* --ranks-per-node) for plan's, which
# override the checkpoint's stored layout.
#
# Hosts, on one machine: a host is a group of its slots (ranks). --hosts
# "a:2 b:2" is 4 ranks, 0-1 on host a and 2-3 on host b (a name alone is one
# slot); --np N (or a plain number for --hosts) is N slots of one host,
# "localhost". What is lost comes from, in this order of authority:
#   --lost-file FILE  lines HOST (the whole host) or HOST:K (K of its slots):
#                     what is lost so far; read every 0.5 s while the job runs
#                     (a new loss stops the job) and after it ends;
#   --probe CMD       run (bash -c) once after the job ends; prints lines as above;
#   neither:          the rank mpirun reports dead of a signal ("process rank R
#                     ... exited on signal N") loses its slot.
# Losses accumulate: a slot once lost stays lost; a host loses its last slots.
#
# A restart happens when the job ends with a non-zero status (or a loss is
# reported while it runs) and either a slot was lost (plan then chooses the
# layout for the slots left, or for fewer ranks when no layout fits them all)
# or the checkpoint moved on since the launch (the same launch again).
# Otherwise, after --max-restarts restarts (default 3), or when no layout fits
# even one rank, it gives up with one line and status 1. Every step is one
# line starting "elastic: ".
#
# Environment: MESHTRAIN (default build/meshtrain), MPIRUN (default "mpirun
# --oversubscribe"), and ELASTIC_HOSTS, ELASTIC_LOST_FILE, ELASTIC_PROBE,
# ELASTIC_MAX_RESTARTS, ELASTIC_PLAN_FLAGS as defaults of the options.
# --plan-flags are plan's device flags (default "--cpu --cpu-gflops 100
# --cpu-bw 3.5 --cpu-cores <this machine's>"; scripts/cpu_rates.sh measures
# real ones); the script adds --gpus, --global-batch, the model's flags (from
# train --print-config of the run, the vocabulary from its output or
# checkpoint), and unless given --gpus-per-node (the most slots a host has
# left), --precision (the run's: fp32, else bf16), --mem-gb (this machine's
# memory over the ranks).
set -uo pipefail

log() { printf 'elastic: %s\n' "$*"; }
usage() { log "usage error: $*" >&2; exit 2; }

MT=${MESHTRAIN:-build/meshtrain}
read -r -a MPI <<<"${MPIRUN:-mpirun --oversubscribe}"
hosts_spec=${ELASTIC_HOSTS:-}
lost_file=${ELASTIC_LOST_FILE:-}
probe=${ELASTIC_PROBE:-}
max_restarts=${ELASTIC_MAX_RESTARTS:-3}
plan_flags=${ELASTIC_PLAN_FLAGS:-}
ckpt_dir='' ckpt_every=''
while [ $# -gt 0 ]; do
    case $1 in
    --hosts | --np | --ckpt-dir | --ckpt-every | --max-restarts | --lost-file | --probe | --plan-flags)
        [ $# -ge 2 ] || usage "$1 needs a value" ;;&
    --hosts | --np) hosts_spec=$2; shift 2 ;;
    --ckpt-dir) ckpt_dir=$2; shift 2 ;;
    --ckpt-every) ckpt_every=$2; shift 2 ;;
    --max-restarts) max_restarts=$2; shift 2 ;;
    --lost-file) lost_file=$2; shift 2 ;;
    --probe) probe=$2; shift 2 ;;
    --plan-flags) plan_flags=$2; shift 2 ;;
    --) shift; break ;;
    *) usage "unknown option '$1' (train's flags go after --)" ;;
    esac
done
[ -n "$hosts_spec" ] || usage "give --hosts \"a:2 b:2\" or --np N (or ELASTIC_HOSTS)"
[ -n "$ckpt_dir" ] || usage "give --ckpt-dir DIR (where the job saves and every restart resumes)"
[[ $ckpt_every =~ ^[1-9][0-9]*$ ]] || usage "give --ckpt-every K (K >= 1), got '$ckpt_every'"
[[ $max_restarts =~ ^[0-9]+$ ]] || usage "--max-restarts must be a number, got '$max_restarts'"
[ $# -gt 0 ] || usage "give train's flags after --"
[ -x "$MT" ] || usage "no meshtrain binary at $MT (build it, or set MESHTRAIN)"

# ---- hosts and slots ----
declare -a host_names=() host_slots=()
declare -A lost=() # slots lost per host
if [[ $hosts_spec =~ ^[1-9][0-9]*$ ]]; then
    host_names=(localhost) host_slots=("$hosts_spec") lost[localhost]=0
else
    for h in $hosts_spec; do
        name=${h%%:*} n=1
        [[ $h == *:* ]] && n=${h#*:}
        [[ $name =~ ^[A-Za-z0-9._-]+$ && $n =~ ^[1-9][0-9]*$ ]] || usage "--hosts: '$h' is not NAME or NAME:SLOTS"
        [ -z "${lost[$name]+x}" ] || usage "--hosts: host '$name' named twice"
        host_names+=("$name") host_slots+=("$n") lost[$name]=0
    done
fi
[ ${#host_names[@]} -gt 0 ] || usage "--hosts names no host"
slots_of() { local i; for i in "${!host_names[@]}"; do [ "${host_names[i]}" = "$1" ] && { echo "${host_slots[i]}"; return; }; done; echo 0; }
avail_of() { echo $(($(slots_of "$1") - ${lost[$1]})); }
avail_total() { local t=0 h; for h in "${host_names[@]}"; do t=$((t + $(avail_of "$h"))); done; echo $t; }
avail_desc() { # "a:2 b:1": the hosts with slots left
    local h out=''
    for h in "${host_names[@]}"; do [ "$(avail_of "$h")" -gt 0 ] && out+="${out:+ }$h:$(avail_of "$h")"; done
    echo "${out:-none}"
}
declare -A warned=()
warn_once() { [ -n "${warned[$1]+x}" ] || { warned[$1]=1; log "$1"; }; }
mark() { # HOST K SOURCE: K slots of HOST ("all": every one) are lost in all; never fewer than before
    local h=$1 k=$2 n
    n=$(slots_of "$h")
    [ "$n" -gt 0 ] || { warn_once "ignoring '$h' from $3: no such host (hosts: $hosts_spec)"; return 0; }
    [ "$k" = all ] && k=$n
    [ "$k" -gt "$n" ] && k=$n
    [ "$k" -gt "${lost[$h]}" ] && lost[$h]=$k
    return 0
}
read_lost() { # SOURCE: lines HOST or HOST:K on stdin
    local line
    while IFS= read -r line; do
        line=${line%%#*} line=${line//[[:space:]]/}
        [ -n "$line" ] || continue
        if [[ $line =~ ^([A-Za-z0-9._-]+)(:([0-9]+))?$ ]]; then
            mark "${BASH_REMATCH[1]}" "${BASH_REMATCH[3]:-all}" "$1"
        else
            warn_once "ignoring '$line' from $1: not HOST or HOST:K"
        fi
    done
}

# ---- train's flags: the layout ones, and the ones this script owns ----
layout_valued=" dp tp pp zero shard-group micro-batch recompute pp-schedule pp-chunks pp-layers zeropp-hpz ranks-per-node "
layout_switch=" sequence-parallel zeropp-qwz zeropp-qgz "
declare -a args=("$@") stripped_args=() # train's flags, and without the layout ones
user_layout=0 i=0
while [ $i -lt ${#args[@]} ]; do
    a=${args[i]} name=${args[i]#--}
    name=${name%%=*}
    case $a in
    --resume | --resume=* | --resume-auto | --ckpt-dir | --ckpt-dir=* | --ckpt-every | --ckpt-every=*)
        usage "give --$name to elastic.sh, not to train (every launch adds --ckpt-dir DIR --ckpt-every K --resume auto)" ;;
    esac
    if [[ $a == --* && $layout_valued == *" $name "* ]]; then
        user_layout=1
        [[ $a == *=* ]] || i=$((i + 1))
    elif [[ $a == --* && $layout_switch == *" $name "* ]]; then
        user_layout=1
    else
        stripped_args+=("$a")
    fi
    i=$((i + 1))
done

tmp=$(mktemp -d) || { log "giving up: mktemp -d failed"; exit 1; }
job='' shower=''
declare -A rank_pids=()
# ranks left running after mpirun ended (killed, or they linger): recorded while
# it ran (its children); a pid is killed only while it is a live meshtrain
kill_ranks() {
    local p st n=0
    for p in "${!rank_pids[@]}"; do
        [ "$(cat /proc/"$p"/comm 2>/dev/null)" = meshtrain ] || continue
        st=$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' /proc/"$p"/status 2>/dev/null)
        [ -n "$st" ] && [ "$st" != Z ] && kill -KILL "$p" 2>/dev/null && n=$((n + 1))
    done
    rank_pids=()
    [ $n -eq 0 ] || log "killed $n rank process(es) the job left running"
}
cleanup() {
    [ -n "$job" ] && kill -KILL "$job" 2>/dev/null
    kill_ranks
    [ -n "$shower" ] && kill "$shower" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'log "stopping: signal received, ending the job"; exit 143' INT TERM

ckpt_step() { # the newest checkpoint's step, or nothing (the manifest is written last, atomically)
    [ -f "$ckpt_dir/manifest.json" ] || return 0
    grep -o '"step":[0-9]*' "$ckpt_dir/manifest.json" 2>/dev/null | head -1 | cut -d: -f2
}

# ---- the layout plan chooses ----
declare -a plan_model=() layout=()
plan_batch='' plan_prec='' plan_err='' layout_desc='' np=0
# plan_inputs: the model, batch and precision of the run (its effective settings)
plan_inputs() {
    local cfg line sec key val vocab=''
    local -a peft=() peft_opts=()
    cfg=$("$MT" train "${stripped_args[@]}" --ckpt-dir "$ckpt_dir" --resume auto --print-config 2>&1) ||
        { plan_err="train --print-config failed: $(grep -m1 'error' <<<"$cfg")"; return 1; }
    plan_model=() plan_batch='' plan_prec=fp32 sec=''
    while IFS= read -r line; do
        [[ $line == '#'* ]] && continue
        if [[ $line =~ ^([a-z]+):$ ]]; then sec=${BASH_REMATCH[1]}; continue; fi
        [[ $line =~ ^\ \ ([a-z0-9-]+):\ (.*)$ ]] || continue
        key=${BASH_REMATCH[1]} val=${BASH_REMATCH[2]}
        [[ $val == \"*\" ]] && val=${val:1:${#val}-2}
        case $sec:$key in
        model:init-from) ;;
        model:vocab) vocab=$val ;;
        model:*) plan_model+=("--$key" "$val") ;;
        schedule:batch) plan_batch=$val ;;
        precision:precision) plan_prec=$val ;;
        peft:peft) [ "$val" = none ] || peft=(--peft "$val") ;;
        peft:lora-r | peft:lora-targets) [ -n "$val" ] && peft_opts+=("--$key" "$val") ;;
        peft:quantize-base) [ "$val" = none ] || peft_opts+=("--$key" "$val") ;;
        peft:double-quant) [ "$val" = true ] && peft_opts+=(--double-quant) ;;
        esac
    done <<<"$cfg"
    [ ${#peft[@]} -gt 0 ] && plan_model+=("${peft[@]}" "${peft_opts[@]}") # a fine-tune's layouts for --peft runs
    [ "$plan_prec" = fp32 ] || plan_prec=bf16                             # plan knows fp32 and bf16 (fp16's bytes are bf16's)
    # the vocabulary (train's default depends on the data): the last launch's model line, else the checkpoint's
    [ -z "$vocab" ] && [ -f "$tmp/launch.log" ] && vocab=$(sed -n 's/^model: .* V=\([0-9]*\) .*/\1/p' "$tmp/launch.log" | head -1)
    [ -z "$vocab" ] && [ -f "$ckpt_dir/manifest.json" ] && vocab=$(grep -o '"vocab_size":[0-9]*' "$ckpt_dir/manifest.json" | head -1 | cut -d: -f2)
    [ -n "$vocab" ] || { vocab=50257; log "the vocabulary is unknown before the job has run: planning with --vocab 50257 (give train --vocab for an exact plan)"; }
    plan_model+=(--vocab "$vocab")
    return 0
}
# plan_for M: plan's best layout for M ranks -> layout, layout_desc (or plan_err)
plan_for() {
    local m=$1 out line gpn=0 h a kb dp tp pp zero g mb ch sp rec t
    local -a flags cmd
    for h in "${host_names[@]}"; do a=$(avail_of "$h"); [ "$a" -gt "$gpn" ] && gpn=$a; done
    [ "$gpn" -gt "$m" ] && gpn=$m
    read -r -a flags <<<"${plan_flags:---cpu --cpu-gflops 100 --cpu-bw 3.5 --cpu-cores $(getconf _NPROCESSORS_ONLN)}"
    [[ " ${flags[*]} " == *" --gpus-per-node "* ]] || flags+=(--gpus-per-node "$gpn")
    [[ " ${flags[*]} " == *" --precision "* ]] || flags+=(--precision "$plan_prec")
    if [[ " ${flags[*]} " != *" --mem-gb "* ]]; then
        kb=$(sed -n 's/^MemTotal: *\([0-9]*\) kB/\1/p' /proc/meminfo)
        [ -n "$kb" ] && flags+=(--mem-gb "$((kb / m / 1000000)).$(printf '%03d' $((kb / m / 1000 % 1000)))")
    fi
    cmd=("$MT" plan "${flags[@]}" --gpus "$m" --global-batch "$plan_batch" "${plan_model[@]}" --json --top 1)
    log "asking plan for $m ranks: $(printf '%q ' "${cmd[@]}")"
    out=$("${cmd[@]}" 2>&1)
    line=$(grep -m1 '^{"dp":' <<<"$out")
    if [ -z "$line" ]; then
        plan_err="plan finds no layout for $m ranks (global batch $plan_batch): $(grep -m1 . <<<"$out")"
        return 1
    fi
    get() { sed -n "s/.*\"$1\":\"\{0,1\}\([^,\"}]*\).*/\1/p" <<<"$line"; }
    dp=$(get dp) tp=$(get tp) pp=$(get pp) zero=$(get zero) g=$(get shard_group) mb=$(get micro_batch)
    ch=$(get chunks) sp=$(get sequence_parallel) rec=$(get recompute) t=$(get t_step)
    layout=(--dp "$dp" --tp "$tp" --pp "$pp" --zero "$zero" --micro-batch "$mb" --recompute "$rec")
    [ "$g" != "$dp" ] && layout+=(--shard-group "$g")
    [ "$sp" = 1 ] && layout+=(--sequence-parallel)
    [ "$ch" -gt 1 ] && layout+=(--pp-schedule interleaved --pp-chunks "$ch")
    layout_desc="plan's best layout for $m ranks ($gpn per host, global batch $plan_batch, $plan_prec): ${layout[*]} (predicted $t s/step)"
    return 0
}
# choose_layout M: the layout for M ranks, or for the most ranks below M that
# has one; sets np, layout, launch_args; gives up when none has
choose_layout() {
    local m=$1 first_err=''
    plan_inputs || { log "giving up: $plan_err"; exit 1; }
    while [ "$m" -ge 1 ]; do
        if plan_for "$m"; then
            log "$layout_desc"
            np=$m launch_args=("${stripped_args[@]}" "${layout[@]}")
            return 0
        fi
        [ -n "$first_err" ] || first_err=$plan_err
        [ "$m" -gt 1 ] && log "$plan_err: trying $((m - 1)) of the $1 ranks"
        m=$((m - 1))
    done
    log "giving up: $first_err, nor for fewer ranks"
    exit 1
}

# ---- one launch: sets rc and stopped_for ----
run_job() {
    local p h before
    local -a cmd=("${MPI[@]}" -np "$np" "$MT" train "${launch_args[@]}" --ckpt-dir "$ckpt_dir" --ckpt-every "$ckpt_every" --resume auto)
    log "launch $launch on $np rank(s) (hosts $(launch_desc)): $(printf '%q ' "${cmd[@]}")"
    launch_start=$SECONDS
    : >"$tmp/launch.log"
    "${cmd[@]}" >"$tmp/launch.log" 2>&1 </dev/null &
    job=$!
    tail -n +1 -s 0.2 -f --pid=$job "$tmp/launch.log" & # its output, as it comes
    shower=$!
    stopped_for=''
    while kill -0 "$job" 2>/dev/null; do
        for p in $(ps -o pid= --ppid "$job" 2>/dev/null); do rank_pids[$p]=1; done
        if [ -n "$lost_file" ] && [ -f "$lost_file" ]; then
            before=$(declare -p lost)
            read_lost "$lost_file" <"$lost_file"
            if [ "$before" != "$(declare -p lost)" ]; then
                stopped_for=$(for h in "${host_names[@]}"; do [ "${lost[$h]}" -gt 0 ] && printf '%s:%s ' "$h" "${lost[$h]}"; done)
                log "$lost_file reports lost slots (${stopped_for% }) while the job runs: stopping it"
                kill -KILL "$job" 2>/dev/null
                break
            fi
        fi
        sleep 0.5
    done
    wait "$job" 2>/dev/null
    rc=$?
    job=''
    wait "$shower" 2>/dev/null
    shower=''
    kill_ranks
}
# this launch's ranks, host by host: first_rank, used (slots in use), have (slots left)
declare -A first_rank=() used=() have=()
place() {
    local h r=0 left=$np
    for h in "${host_names[@]}"; do
        have[$h]=$(avail_of "$h")
        used[$h]=$((have[$h] < left ? have[$h] : left))
        first_rank[$h]=$r
        r=$((r + used[$h])) left=$((left - used[$h]))
    done
}
launch_desc() {
    local h out=''
    for h in "${host_names[@]}"; do [ "${used[$h]}" -gt 0 ] && out+="${out:+ }$h:${used[$h]}"; done
    echo "$out"
}

launch=1 restarts=0
np=$(avail_total)
if [ $user_layout -eq 1 ]; then
    launch_args=("${args[@]}") # the first launch: train's flags as given
else
    choose_layout "$np"
fi
mpirun_report="mpirun's report"
src=${lost_file:+$lost_file}
[ -n "$probe" ] && src="${src:+$src and }the probe '$probe'"
while :; do
    place
    step0=$(ckpt_step)
    run_job
    secs=$((SECONDS - launch_start))
    if [ $rc -eq 0 ] && [ -z "$stopped_for" ]; then
        log "the job finished (exit 0) after $secs s on $np rank(s); checkpoint at step $(ckpt_step) in $ckpt_dir; $restarts restart(s)"
        exit 0
    fi
    report=$(grep -m1 -o 'process rank [0-9]* with PID [0-9]* on node [^ ]* exited on signal [0-9]*[^.]*' "$tmp/launch.log")
    log "launch $launch ended with status $rc after $secs s${report:+; mpirun: $report}"
    # what is lost
    dead=''
    if [ -n "$src" ]; then
        [ -n "$lost_file" ] && [ -f "$lost_file" ] && read_lost "$lost_file" <"$lost_file"
        if [ -n "$probe" ]; then
            pout=$(bash -c "$probe" 2>&1) || log "the probe '$probe' exited with status $? (its lines count)"
            read_lost "the probe" <<<"$pout"
        fi
    elif [[ $report =~ process\ rank\ ([0-9]+)\  ]]; then
        dead=${BASH_REMATCH[1]}
        for h in "${host_names[@]}"; do
            if [ "$dead" -ge "${first_rank[$h]}" ] && [ "$dead" -lt $((first_rank[$h] + used[$h])) ]; then
                mark "$h" $((lost[$h] + 1)) "mpirun's report"
            fi
        done
    fi
    lost_now=0
    for h in "${host_names[@]}"; do
        gone=$((have[$h] - $(avail_of "$h")))
        [ $gone -gt 0 ] || continue
        lost_now=$((lost_now + gone))
        # a host loses its last slots: the ranks of this launch among them
        in_use=$((used[$h] - $(avail_of "$h")))
        ranks='not in use'
        if [ -n "$dead" ]; then
            ranks="rank $dead of launch $launch died"
        elif [ $in_use -gt 0 ]; then
            lo=$((first_rank[$h] + used[$h] - in_use)) hi=$((first_rank[$h] + used[$h] - 1))
            ranks="rank$([ $hi -gt $lo ] && echo "s $lo-$hi" || echo " $lo") of launch $launch"
        fi
        what="$gone slot(s) of host $h"
        [ "$(avail_of "$h")" -eq 0 ] && what="host $h ($gone slot(s))"
        log "lost $what: $ranks (from ${src:-$mpirun_report})"
    done
    step1=$(ckpt_step)
    if [ $lost_now -eq 0 ] && [ "${step1:-none}" = "${step0:-none}" ]; then
        log "giving up: the job failed (status $rc) without losing a rank and without a new checkpoint (its output is above)"
        exit 1
    fi
    m=$(avail_total)
    [ "$m" -gt 0 ] || { log "giving up: no ranks left (hosts $hosts_spec all lost)"; exit 1; }
    [ $restarts -lt "$max_restarts" ] || { log "giving up: $restarts restart(s) done, the most allowed (--max-restarts $max_restarts)"; exit 1; }
    log "$m rank(s) left: $(avail_desc)"
    if [ -n "$step1" ]; then
        v=$("$MT" ckpt verify "$ckpt_dir" 2>&1) || { log "giving up: the checkpoint in $ckpt_dir does not verify: $(grep -m1 . <<<"$v")"; exit 1; }
        log "newest complete checkpoint: $ckpt_dir at step $step1 (ckpt verify: ok)"
    else
        log "no checkpoint in $ckpt_dir yet: the restart starts fresh"
    fi
    if [ $lost_now -gt 0 ]; then
        choose_layout "$m"
    else
        log "no rank lost and the checkpoint moved from step ${step0:-none} to $step1: the same launch again"
    fi
    restarts=$((restarts + 1)) launch=$((launch + 1))
    log "restart $restarts of at most $max_restarts: $np rank(s), resuming from $([ -n "$step1" ] && echo "step $step1" || echo scratch)"
done
