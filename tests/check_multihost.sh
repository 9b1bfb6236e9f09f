#!/usr/bin/env bash
# Multi-host runs across network namespaces (docs/usage.md "Multi-host"):
# the test makes a launcher namespace holding a bridge (10.213.77.1/24) and two
# host namespaces (10.213.77.2 and .3, each its own hostname) joined to it by
# links of the test's own: a TAP device on the bridge and one in the host,
# joined by a delay line (tests/delay_line.c: this kernel has no netem) that
# passes every frame both ways after a set delay; mpirun runs in the launcher namespace with --hostfile and
# reaches the hosts through an rsh agent that enters their namespace; Open MPI
# speaks TCP only on that subnet, so every byte between hosts crosses the
# links. Everything is removed at the end. Cases:
#  1. dp2 x tp2 on 4 ranks, tp inside a host and dp across the two: the
#     per-step losses equal one process's (1e-5 relative);
#  2. the links delayed (25 ms each way, so 50 ms round trips) and limited to a
#     few Mbit/s (tc tbf) with a --timeout shorter than a step's gradient
#     all-reduce takes: the run completes, no deadline fires, a warning names
#     the slow link, and the step time is printed;
#  3. host b's link taken down mid-run: every rank exits within the deadline
#     (plus grace), a message names the collective, the unresponsive ranks
#     ("no response") and their host, and mpirun exits within a bound too.
# Skipped (exit 77, one line) where the sandbox refuses network namespaces.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
one_thread
MB=$(realpath "$M")
NET=10.213.77
P=mt$$
C=${P}c # the launcher's namespace: the bridge, mpirun
HOSTS="a b"
if ! ip netns add $C 2>$W/ns.err; then
    echo "SKIP: network namespaces refused here (ip netns add: $(head -c 120 $W/ns.err | tr '\n' ' '))"
    exit 77
fi
on_exit "ip netns del $C"
DL=$W/delay_line
cc -std=c11 -O2 -Wall -Wextra -Werror -o $DL tests/delay_line.c || { fail "cannot build tests/delay_line.c"; exit 1; }
ip -n $C link set lo up
ip -n $C link add br0 type bridge && ip -n $C addr add $NET.1/24 dev br0 && ip -n $C link set br0 up ||
    { echo "SKIP: cannot make a bridge in a network namespace"; exit 77; }
i=2
: >$W/hosts; : >$W/hostfile
for h in $HOSTS; do
    ip netns add $P$h || { fail "ip netns add $P$h"; exit 1; }
    on_exit "ip netns del $P$h"
    on_exit "ip netns pids $P$h | xargs -r kill -9" # what is left in it is this test's (run first)
    ip -n $P$h link set lo up
    ip -n $C tuntap add dev v$h mode tap && ip -n $C link set v$h master br0 && ip -n $C link set v$h up &&
        ip -n $P$h tuntap add dev eth0 mode tap && ip -n $P$h addr add $NET.$i/24 dev eth0 &&
        ip -n $P$h link set eth0 up || { echo "SKIP: cannot make TAP devices in network namespaces"; exit 77; }
    echo "$NET.$i $P$h" >>$W/hosts
    echo "$NET.$i slots=2" >>$W/hostfile
    i=$((i + 1))
done
# the rsh agent: "[-options] HOST COMMAND..." runs COMMAND in HOST's namespace,
# under its own hostname (a UTS namespace), stdin/stdout/stderr passed through
cat >$W/agent <<EOF
#!/bin/sh
while [ \$# -gt 0 ]; do case \$1 in -*) shift ;; *) break ;; esac; done
h=\$1; shift
ns=\$(sed -n "s/^\$h //p" $W/hosts)
[ -n "\$ns" ] || { echo "agent: unknown host \$h" >&2; exit 255; }
exec ip netns exec "\$ns" unshare --uts sh -c 'hostname "\$0" && eval "\$1"' "\$ns" "\$*"
EOF
chmod +x $W/agent
# each rank's stderr also goes to $W/err.RANK (a rank cut off from mpirun cannot forward it)
cat >$W/rank.sh <<EOF
#!/bin/bash
exec "\$@" 2> >(tee -a "\$MT_ERRDIR/err.\$OMPI_COMM_WORLD_RANK" >&2)
EOF
chmod +x $W/rank.sh
# links MS: (re)joins each host's TAP to its bridge port through a delay line of MS ms each way
DLPIDS=
links() {
    local h i
    [ -n "$DLPIDS" ] && { kill $DLPIDS; wait $DLPIDS 2>/dev/null; }
    DLPIDS=
    for h in $HOSTS; do
        ip netns exec $C $DL $1 v$h - eth0 /var/run/netns/$P$h 2>>$W/delay_line.log &
        DLPIDS="$DLPIDS $!"
    done
    for h in $HOSTS; do # the link is up when both TAPs have a carrier
        for i in $(seq 100); do
            ip -n $P$h link show eth0 >$W/l1; ip -n $C link show v$h >$W/l2
            grep -q LOWER_UP $W/l1 && grep -q LOWER_UP $W/l2 && break
            sleep 0.05
        done
    done
}
on_exit '[ -n "$DLPIDS" ] && kill $DLPIDS 2>/dev/null'
MPIH="ip netns exec $C mpirun --hostfile $W/hostfile -np 4 --mca plm_rsh_agent $W/agent --mca plm_rsh_no_tree_spawn 1
 --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include $NET.0/24 --mca oob_tcp_if_include $NET.0/24
 -x OMP_NUM_THREADS -x OPENBLAS_NUM_THREADS -x MT_ERRDIR -x MT_TEST_TAG"
export MT_TEST_TAG=$W MT_ERRDIR
ranks() { # the pids of this test's meshtrain ranks
    local p
    for p in $(grep -lsF "MT_TEST_TAG=$W" /proc/[0-9]*/environ | cut -d/ -f3); do
        [ "$(cat /proc/$p/comm 2>/dev/null)" = meshtrain ] && echo $p
    done
}
corpus m
T="train --train $W/m_train.bin --layers 2 --dim 64 --heads 4 --seq-len 32 --batch 8 --log-every 0"

# 1. dp2 x tp2 across two hosts = one process
t0=$SECONDS
links 0
$M $T --steps 10 --metrics $W/one.jsonl >$W/one.out 2>&1 || { fail "one process"; cat $W/one.out; }
MT_ERRDIR=$W/c1; mkdir -p $MT_ERRDIR
$MPIH $W/rank.sh $MB $T --steps 10 --dp 2 --tp 2 --metrics $W/mh.jsonl --timeout 20 >$W/mh.out 2>&1 ||
    { fail "dp2 x tp2 across hosts exited with $?"; tail -20 $W/mh.out; }
losses_within $W/one.jsonl $W/mh.jsonl "dp2 x tp2 on hosts $P""a,$P""b" || fail "losses differ"
echo "($((SECONDS - t0)) s)"

# 2. the links delayed by DELAY ms each way and limited to $RATE (tc tbf at
# both ends): with a timeout shorter than the gradient all-reduce takes over
# them no deadline fires, and the step time is reported
t0=$SECONDS
RATE=${MT_MULTIHOST_RATE:-2mbit} DELAY=${MT_MULTIHOST_DELAY_MS:-25} TMO=1
links $DELAY
for h in $HOSTS; do
    for d in "$C v$h" "$P$h eth0"; do
        set -- $d
        tc -n $1 qdisc add dev $2 root tbf rate $RATE burst 16kb latency 50ms ||
            { echo "SKIP: tc tbf refused (the kernel lacks sch_tbf?)"; exit 77; }
    done
done
MT_ERRDIR=$W/c2; mkdir -p $MT_ERRDIR
$MPIH $W/rank.sh $MB $T --steps 4 --dp 2 --tp 2 --bucket-mb 64 --metrics $W/slow.jsonl --timeout $TMO \
    >$W/slow.out 2>&1 || fail "the run over the shaped links exited with $?"
grep -q "timeout:" $W/slow.out && fail "a deadline fired over the slow links: $(grep -m1 timeout: $W/slow.out | cut -c1-300)"
[ "$(grep -c '"step"' $W/slow.jsonl)" = 4 ] || fail "not 4 steps over the shaped links"
grep -m1 "warning: .*slow link" $W/slow.out | cut -c1-200 | grep . || fail "no slow-link warning over the shaped links"
ms=$(grep -o '"ms":[0-9.]*' $W/slow.jsonl | cut -d: -f2 | tr '\n' ' ')
echo "shaped links ($DELAY ms each way, $RATE, --timeout $TMO): step ms: $ms ($((SECONDS - t0)) s)"
$PY -c "import sys; ms = [float(x) for x in sys.argv[1:]]; sys.exit(0 if max(ms[1:]) > 1000 * $TMO else 1)" $ms ||
    fail "no step took longer than the timeout ($TMO s): the link limit did not bite"

# 3. host b's link taken down mid-run (no shaping): every rank exits within two
# deadlines (a peer silent at two deadlines in a row is dead) plus the
# diagnosis windows and grace; some rank's line names the collective, the
# ranks that did not answer and their host; and mpirun exits too
for h in $HOSTS; do tc -n $C qdisc del dev v$h root; tc -n $P$h qdisc del dev eth0 root; done
t0=$SECONDS
links 0
[ -n "${MT_MULTIHOST_RETRIES2-4}" ] && for n in $C ${P}a ${P}b; do ip netns exec $n sysctl -qw net.ipv4.tcp_retries2=${MT_MULTIHOST_RETRIES2-4}; done
TMO=3 RBOUND=12 LINKMCA=${MT_MULTIHOST_LINKMCA-"--mca oob_tcp_keepalive_time 4 --mca oob_tcp_keepalive_intvl 2 --mca oob_tcp_keepalive_probes 3"} MBOUND=${MT_MULTIHOST_MPIRUN_BOUND:-20}
MT_ERRDIR=$W/c3; mkdir -p $MT_ERRDIR
$MPIH $LINKMCA $W/rank.sh $MB $T --steps 100000 --dp 2 --tp 2 --metrics $W/down.jsonl --timeout $TMO \
    >$W/down.out 2>&1 &
mp=$!
on_exit "kill -9 $mp 2>/dev/null"
steps() { cat $W/down.jsonl 2>/dev/null | grep -c '"step"'; }
for i in $(seq 600); do [ "$(steps)" -ge 3 ] && break; sleep 0.1; done
[ "$(steps)" -ge 3 ] || { fail "the run did not reach step 3"; cat $W/down.out; exit 1; }
[ "$(ranks | wc -l)" = 4 ] || fail "expected 4 ranks running, found $(ranks | wc -l)"
ip -n ${P}b link set eth0 down
td=$(date +%s.%N) tr= tm= tn=
el() { $PY -c "import sys; print(f'{float(sys.argv[1]) - float(sys.argv[2]):.1f}')" "$(date +%s.%N)" $td; }
for i in $(seq 600); do # up to 60 s
    [ -z "$tr" ] && [ -z "$(ranks)" ] && tr=$(el)
    [ -z "$tm" ] && ! kill -0 $mp 2>/dev/null && tm=$(el)
    [ -z "$tn" ] && [ -z "$(ip netns pids ${P}a; ip netns pids ${P}b)" ] && tn=$(el)
    [ -n "$tr" ] && [ -n "$tm" ] && [ -n "$tn" ] && break
    sleep 0.1
done
rc=running; [ -n "$tm" ] && { wait $mp; rc=$?; }
[ -n "$tm" ] || kill -9 $mp 2>/dev/null # (the host namespaces' processes: on exit)
echo "link down after step $(steps): ranks gone after ${tr:-60+} s, mpirun after ${tm:-60+} s (status $rc), every process in the host namespaces after ${tn:-60+} s (--timeout $TMO)"
[ -n "$tr" ] && $PY -c "import sys; sys.exit(float(sys.argv[1]) > $RBOUND)" $tr || fail "ranks not gone within $RBOUND s"
[ -n "$tm" ] && $PY -c "import sys; sys.exit(float(sys.argv[1]) > $MBOUND)" $tm || fail "mpirun not gone within $MBOUND s"
[ -n "$tn" ] && $PY -c "import sys; sys.exit(float(sys.argv[1]) > $MBOUND)" $tn || fail "daemons not gone within $MBOUND s"
for r in 0 1 2 3; do grep -m1 "timeout:" $MT_ERRDIR/err.$r 2>/dev/null | cut -c1-250 | sed "s/^/  rank $r | /"; done
grep -qh "timeout: [a-z_]* #[0-9]* on group .*did not arrive: .*(world rank [0-9] on host $P[ab]: no response" $MT_ERRDIR/err.* ||
    fail "no rank's line names the collective, the silent ranks and their host"
echo "($((SECONDS - t0)) s)"

echo "done"
exit $((fails > 0))
