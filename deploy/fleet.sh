#!/usr/bin/env bash
# deploy/fleet.sh: a spool fleet on this machine.
#
# Starts redis-server and versitygw on free loopback ports, builds
# ./cmd/spool, starts WORKERS worker processes, pushes THREADS threads of
# DIRECTIVE, scales the fleet up and down while they run (starting workers,
# SIGTERM-ing busy ones) following SCALE_PLAN, waits for every thread,
# and prints the threads pushed, the workers over time, the completions, the
# throughput, how many activations draining workers handed back, and
# "lost: 0" only if every thread completed.
#
# Scale events fire only while threads are in flight (pushed, not yet
# completed): event i of N fires STEP seconds after the previous one, or as
# soon as i/(N+1) of the first half of the batch has completed, whichever
# comes first (at most one event per look at the progress, a few tenths of
# a second apart), so even a small batch that completes in waves of
# WORKERS x CONCURRENCY threads sees every event while threads run. A
# scale-down SIGTERMs the busiest workers first (see look_busy), oldest
# first among equals, so it lands on running threads, which the workers
# finish or checkpoint and hand back. A planned scale-down
# that could not land while threads were in flight (the batch finished
# first, or only one worker was left to stop) fails the run.
#
#   deploy/fleet.sh                                  # default: 40 threads, 3 workers
#   THREADS=16 WORKERS=2 SCALE_PLAN="+1 -1" deploy/fleet.sh   # what .ci/run runs
#   THREADS=200 WORKERS=4 SCALE_PLAN="+4 +4 -6 +2 -3" deploy/fleet.sh
#
# Everything binds to 127.0.0.1 and lives in a temporary directory, removed
# on success (KEEP=1 keeps it; it is kept on failure, with every log).
# Exit status: 0 when nothing was lost, every planned scale-down landed
# while threads were in flight, and every worker exited cleanly.
#
# Needs: bash >= 5, go, redis-server, redis-cli, versitygw (PATH or
# ~/go/bin), curl.
set -euo pipefail

THREADS=${THREADS:-40}                  # threads in the batch
WORKERS=${WORKERS:-3}                   # workers at the start
CONCURRENCY=${CONCURRENCY:-4}           # spool worker --concurrency
SCALE_PLAN=${SCALE_PLAN:-"+2 -2 +1 -1"} # scale events in order: +N starts N workers, -N SIGTERMs N (busy first, then oldest)
STEP=${STEP:-1}                         # at most this many seconds between scale events (decimals allowed)
SHUTDOWN_TIMEOUT=${SHUTDOWN_TIMEOUT:-10s} # spool worker --shutdown-timeout
TIMEOUT=${TIMEOUT:-300}                 # seconds to wait for the batch
PUSH_JOBS=${PUSH_JOBS:-4}               # `spool thread run` processes at once
DIRECTIVE=${DIRECTIVE:-demo/fleet}
MODEL=${MODEL:-}                        # e.g. script:scripts/fleet.yaml; empty: the directive's own model
KEEP=${KEEP:-0}
SPOOL_BIN=${SPOOL_BIN:-}                # a prebuilt spool binary; empty: go build ./cmd/spool

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PROJECT=${PROJECT:-$ROOT/examples}

die() {
	echo "fleet: $*" >&2
	exit 1
}

is_uint() { [[ $1 =~ ^[0-9]+$ ]]; }
for v in THREADS WORKERS CONCURRENCY TIMEOUT PUSH_JOBS; do
	is_uint "${!v}" || die "$v=${!v}: want a non-negative integer"
done
((THREADS > 0 && WORKERS > 0 && CONCURRENCY > 0 && PUSH_JOBS > 0)) ||
	die "THREADS, WORKERS, CONCURRENCY and PUSH_JOBS must be positive"
for s in $SCALE_PLAN; do
	[[ $s =~ ^[+-][0-9]+$ ]] || die "SCALE_PLAN step \"$s\": want +N or -N"
done
[[ $STEP =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "STEP=$STEP: want seconds, e.g. 1.5"
[[ $SHUTDOWN_TIMEOUT =~ ^[1-9][0-9]*s$ ]] || die "SHUTDOWN_TIMEOUT=$SHUTDOWN_TIMEOUT: want whole seconds, e.g. 10s"
((BASH_VERSINFO[0] >= 5)) || die "needs bash >= 5 (EPOCHREALTIME)"
for tool in go redis-server redis-cli curl; do
	command -v "$tool" >/dev/null || die "$tool not found on PATH"
done
VGW=$(command -v versitygw || true)
if [[ -z $VGW && -x $HOME/go/bin/versitygw ]]; then
	VGW=$HOME/go/bin/versitygw
fi
[[ -n $VGW ]] || die "versitygw not found on PATH or in ~/go/bin (go install github.com/versity/versitygw/cmd/versitygw@latest)"
[[ -d $PROJECT/.ai ]] || die "project $PROJECT has no .ai/ directory"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/spool-fleet.XXXXXX")
declare -A OWNED=() # pid -> 1 for every child still to be reaped; killed on exit
declare -A WPID=() WSTOP=() WPLAN=() WLINES=() # worker -> pid, SIGTERM time, 1 if a planned scale-down stopped it, log lines then
declare -A WPORT=() WTURNS=() WBUSY=() # worker -> metrics port, "turns finished" counters, busy score at the last look
declare -A WREADY=() WDEADLINE=()      # worker -> 1 once /healthz answered, the SECONDS by which it must
LIVE=()         # worker numbers serving, oldest first
DRAINING=()     # worker numbers SIGTERMed and not yet reaped
NEXT_WORKER=1
UNCLEAN_EXITS=0
DRAIN_MAX=0
HANDED_BACK=0      # activations handed back by workers a planned scale-down stopped
HANDED_BACK_END=0  # ... by workers stopped after the batch (should be 0)
RAN_AT_STOP=0      # activations running on workers a planned scale-down stopped (handed back or finished while draining)
DOWN_PLANNED=0     # planned scale-down events
DOWN_LANDED=0      # ... that SIGTERMed a worker while threads were in flight
EVENTS=()       # "workers over time" lines for the summary
T0=$EPOCHREALTIME

cleanup() {
	local rc=$? pid deadline
	trap - EXIT INT TERM
	for pid in "${!OWNED[@]}"; do
		kill -TERM "$pid" 2>/dev/null || true
	done
	deadline=$((SECONDS + 15))
	for pid in "${!OWNED[@]}"; do
		while alive "$pid" && ((SECONDS < deadline)); do
			sleep 0.1
		done
		kill -KILL "$pid" 2>/dev/null || true
	done
	wait 2>/dev/null || true
	if ((rc != 0)) || [[ $KEEP == 1 ]]; then
		echo "fleet: logs kept in $WORK" >&2
	else
		rm -rf "$WORK"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# alive PID: the process exists and is not a zombie awaiting `wait`.
alive() {
	local st
	st=$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null) || return 1
	[[ -n $st && $st != Z ]]
}

# since T: seconds elapsed since the EPOCHREALTIME value T, one decimal.
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }

log() { printf '[%6ss] %s  %s\n' "$(since "$T0")" "$(date +%H:%M:%S)" "$*"; }

# Ports come from below the kernel's ephemeral range: a port in that range
# with no listener may still be the local end of a connection (TIME_WAIT
# after a busy test run), and binding it fails.
USED_PORTS=" "
PORT_LO=10000 PORT_HI=32768
if read -r eph_lo _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null && ((eph_lo > PORT_LO + 2000)); then
	PORT_HI=$eph_lo
fi
free_port() {
	local port _
	for _ in {1..200}; do
		port=$((PORT_LO + RANDOM % (PORT_HI - PORT_LO)))
		[[ $USED_PORTS == *" $port "* ]] && continue
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			USED_PORTS+="$port "
			echo "$port"
			return 0
		fi
	done
	die "no free loopback port"
}

# wait_for DESC SECONDS PID LOG CMD...: retry CMD until it succeeds; fail if
# PID dies or time runs out, showing the tail of LOG.
wait_for() {
	local desc=$1 deadline=$((SECONDS + $2)) pid=$3 logf=$4
	shift 4
	until "$@" >/dev/null 2>&1; do
		if ! alive "$pid"; then
			tail -n 20 "$logf" >&2 || true
			die "$desc exited during start-up"
		fi
		if ((SECONDS >= deadline)); then
			tail -n 20 "$logf" >&2 || true
			die "$desc not ready after $2s"
		fi
		sleep 0.1
	done
}

http_up() { [[ $(curl -s -o /dev/null -w '%{http_code}' "$1") != 000 ]]; }

# --- services -------------------------------------------------------------

mkdir -p "$WORK/redis" "$WORK/s3/fleet" "$WORK/data"
REDIS_PORT=$(free_port)
redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --dir "$WORK/redis" \
	--save "" --appendonly no --protected-mode yes >"$WORK/redis.log" 2>&1 &
OWNED[$!]=1
wait_for redis-server 20 "$!" "$WORK/redis.log" redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping

S3_PORT=$(free_port)
"$VGW" --access fleet --secret fleet-secret-key --port "127.0.0.1:$S3_PORT" \
	posix "$WORK/s3" >"$WORK/versitygw.log" 2>&1 &
OWNED[$!]=1
wait_for versitygw 20 "$!" "$WORK/versitygw.log" http_up "http://127.0.0.1:$S3_PORT/"

unset SPOOL_SIGNING_KEY SPOOL_NAMESPACE AWS_SESSION_TOKEN AWS_PROFILE
export SPOOL_REDIS_URL="redis://127.0.0.1:$REDIS_PORT/0"
export SPOOL_S3_ENDPOINT="http://127.0.0.1:$S3_PORT" SPOOL_S3_BUCKET=fleet
export SPOOL_S3_REGION=us-east-1 SPOOL_S3_PATH_STYLE=true
export AWS_ACCESS_KEY_ID=fleet AWS_SECRET_ACCESS_KEY=fleet-secret-key
export SPOOL_DATA_DIR="$WORK/data" SPOOL_PROJECT="$PROJECT"

if [[ -n $SPOOL_BIN ]]; then
	SPOOL=$SPOOL_BIN
else
	SPOOL=$WORK/spool
	log "building ./cmd/spool"
	(cd "$ROOT" && go build -o "$SPOOL" ./cmd/spool)
fi
"$SPOOL" keys init >"$WORK/keys.log" 2>&1 || {
	cat "$WORK/keys.log" >&2
	die "spool keys init failed"
}

# --- the fleet --------------------------------------------------------------

start_worker() {
	local n=$NEXT_WORKER port pid
	NEXT_WORKER=$((n + 1))
	port=$(free_port)
	# Info level: a draining worker logs each activation it hands back.
	SPOOL_LOG_LEVEL=info "$SPOOL" worker --concurrency "$CONCURRENCY" --shutdown-timeout "$SHUTDOWN_TIMEOUT" \
		--metrics-addr "127.0.0.1:$port" >"$WORK/worker-$n.log" 2>&1 &
	pid=$!
	OWNED[$pid]=1
	WPID[$n]=$pid
	WPORT[$n]=$port
	WREADY[$n]=0
	WDEADLINE[$n]=$((SECONDS + 30))
	LIVE+=("$n")
}

# check_ready [wait]: every live worker must answer /healthz within 30s of
# its start; "wait" waits for them, else each is looked at once (a scale-up
# does not hold the scale loop while the new workers start).
check_ready() {
	local n
	for n in "${LIVE[@]}"; do
		if [[ ${WREADY[$n]} == 1 ]]; then
			continue
		fi
		if [[ -n ${1:-} ]]; then
			wait_for "worker $n" $((WDEADLINE[$n] - SECONDS)) "${WPID[$n]}" "$WORK/worker-$n.log" \
				curl -fsS "http://127.0.0.1:${WPORT[$n]}/healthz"
		elif ! curl -fsS --max-time 1 "http://127.0.0.1:${WPORT[$n]}/healthz" >/dev/null 2>&1; then
			if ! alive "${WPID[$n]}"; then
				tail -n 20 "$WORK/worker-$n.log" >&2 || true
				die "worker $n exited during start-up"
			fi
			((SECONDS < WDEADLINE[$n])) || die "worker $n not ready after 30s"
			continue
		fi
		WREADY[$n]=1
	done
}

# look_busy: read every live worker's spool_turns_total and
# spool_threads_finished_total. A worker whose turns moved since the last
# look is busy (score 1); if no thread of it finished meanwhile, it is
# likely mid-thread (score 2) rather than just done with its last ones.
look_busy() {
	local n t turns fin turns0 fin0
	for n in "${LIVE[@]}"; do
		t=$(curl -fsS --max-time 2 "http://127.0.0.1:${WPORT[$n]}/metrics" 2>/dev/null |
			awk '$1 ~ /^spool_turns_total([{]|$)/ { t += $NF }
				$1 ~ /^spool_threads_finished_total([{]|$)/ { f += $NF }
				END { printf "%d %d", t, f }') || t="0 0"
		read -r turns fin <<<"$t"
		read -r turns0 fin0 <<<"${WTURNS[$n]:-0 0}"
		WBUSY[$n]=0
		if [[ $turns != "$turns0" ]]; then
			WBUSY[$n]=1
			if [[ $fin == "$fin0" ]]; then
				WBUSY[$n]=2
			fi
		fi
		WTURNS[$n]="$turns $fin"
	done
}

# stop_worker [planned]: SIGTERM a live worker, which drains in the
# background: for a planned scale-down the oldest of the busiest (see
# look_busy), else the oldest. "planned" marks a scale-down of the plan,
# not the final stop.
stop_worker() {
	local n=${LIVE[0]} m keep=() why
	if [[ -n ${1:-} ]]; then
		for m in "${LIVE[@]}"; do
			if ((${WBUSY[$m]:-0} > ${WBUSY[$n]:-0})); then
				n=$m
			fi
		done
		case ${WBUSY[$n]:-0} in
		2) why="mid-thread" ;;
		1) why="busy" ;;
		*) why="no worker looked busy" ;;
		esac
		log "scale-down: stopping worker $n ($why)"
	fi
	for m in "${LIVE[@]}"; do
		if [[ $m != "$n" ]]; then
			keep+=("$m")
		fi
	done
	LIVE=("${keep[@]}")
	WLINES[$n]=$(wc -l <"$WORK/worker-$n.log")
	kill -TERM "${WPID[$n]}"
	WSTOP[$n]=$EPOCHREALTIME
	WPLAN[$n]=${1:+1}
	DRAINING+=("$n")
}

# reap: collect the exit status of drained workers.
reap() {
	local keep=() n rc took hb fin
	for n in "${DRAINING[@]}"; do
		if alive "${WPID[$n]}"; then
			keep+=("$n")
			continue
		fi
		rc=0
		wait "${WPID[$n]}" || rc=$?
		unset 'OWNED[${WPID[$n]}]'
		took=$(since "${WSTOP[$n]}")
		DRAIN_MAX=$(awk -v a="$DRAIN_MAX" -v b="$took" 'BEGIN { print (b > a ? b : a) }')
		# What the worker logs for each activation it checkpoints and
		# returns to the queue on SIGTERM (worker.handle).
		hb=$(grep -c 'activation handed back for shutdown' "$WORK/worker-$n.log" || true)
		# Activations that ended otherwise after the SIGTERM were running
		# when it came (a draining worker takes no new ones).
		fin=$(tail -n "+$((WLINES[$n] + 1))" "$WORK/worker-$n.log" |
			grep -cE 'thread finished|thread handed off|thread waiting on children' || true)
		if [[ -n ${WPLAN[$n]} ]]; then
			HANDED_BACK=$((HANDED_BACK + hb))
			RAN_AT_STOP=$((RAN_AT_STOP + hb + fin))
		else
			HANDED_BACK_END=$((HANDED_BACK_END + hb))
		fi
		if ((rc == 0)); then
			log "worker $n (pid ${WPID[$n]}) drained and exited 0 after ${took}s, handed back $hb, finished $fin"
		else
			UNCLEAN_EXITS=$((UNCLEAN_EXITS + 1))
			log "worker $n (pid ${WPID[$n]}) exited with status $rc after ${took}s, handed back $hb, finished $fin (see worker-$n.log)"
		fi
	done
	DRAINING=("${keep[@]}")
}

completed_count() {
	"$SPOOL" thread list --status completed --limit $((THREADS * 2 + 100)) --json 2>/dev/null |
		grep -o '"thread_id"' | wc -l || true
}

pushed_count() { if [[ -f $WORK/ids ]]; then wc -l <"$WORK/ids"; else echo 0; fi; }

# event WHAT [PUSHED COMPLETED]: log a line of the workers over time; the
# counts default to now (a scale event passes the ones it acted on).
event() {
	local what=$1 line
	line=$(printf '%-14s workers: %2d live, %d draining   pushed %d/%d, completed %d' \
		"$what" "${#LIVE[@]}" "${#DRAINING[@]}" "${2:-$(pushed_count)}" "$THREADS" "${3:-$(completed_count)}")
	log "$line"
	EVENTS+=("$(printf '+%6ss  %s  %s' "$(since "$T0")" "$(date +%H:%M:%S)" "$line")")
}

log "redis 127.0.0.1:$REDIS_PORT, versitygw 127.0.0.1:$S3_PORT, work dir $WORK"
for ((i = 0; i < WORKERS; i++)); do
	start_worker
done
check_ready wait
T0=$EPOCHREALTIME
event "start"

RUN=("$SPOOL" thread run "$DIRECTIVE")
if [[ -n $MODEL ]]; then
	RUN+=(--model "$MODEL")
fi

# push_batch: THREADS `spool thread run`, PUSH_JOBS at a time; ids go to
# ids, one per line; the time it finished goes to push_done.
push_batch() {
	local i
	trap 'kill $(jobs -p) 2>/dev/null; exit 143' TERM
	for ((i = 1; i <= THREADS; i++)); do
		"${RUN[@]}" >>"$WORK/ids" 2>>"$WORK/push.log" &
		if ((i % PUSH_JOBS == 0)); then
			wait
		fi
	done
	wait
	echo "$EPOCHREALTIME" >"$WORK/push_done"
}

# wait_batch: `spool thread wait` on every pushed id, 50 per call (the
# reference wait limit); the time the batch was done goes to batch_done.
wait_batch() {
	local ids i left deadline=$((SECONDS + TIMEOUT))
	trap 'kill $(jobs -p) 2>/dev/null; exit 143' TERM
	mapfile -t ids <"$WORK/ids"
	for ((i = 0; i < ${#ids[@]}; i += 50)); do
		left=$((deadline - SECONDS))
		((left > 0)) || left=1
		"$SPOOL" thread wait "${ids[@]:i:50}" --timeout "${left}s" >>"$WORK/wait.txt" 2>>"$WORK/wait.log" || true
	done
	echo "$EPOCHREALTIME" >"$WORK/batch_done"
}

: >"$WORK/ids"
: >"$WORK/wait.txt"
push_batch &
PUSHER=$!
OWNED[$PUSHER]=1
WAITER=""

# tick [SECONDS]: a short pause (default 0.2s) that also reaps drained
# workers, checks that started workers came up, and starts the waiter once
# every thread is pushed.
tick() {
	sleep "${1:-0.2}"
	reap
	check_ready
	if [[ -z $WAITER && -f $WORK/push_done ]]; then
		wait "$PUSHER" || true
		unset 'OWNED[$PUSHER]'
		log "pushed $(pushed_count) of $THREADS threads in $(awk -v a="$T0" -v b="$(<"$WORK/push_done")" 'BEGIN { printf "%.1f", b - a }')s"
		wait_batch &
		WAITER=$!
		OWNED[$WAITER]=1
	fi
}

# The scale plan runs while the batch does, on progress: event i of N is
# due STEP seconds after the previous event or once i/(N+1) of the first
# half of the batch has completed, whichever is first, and fires only while
# threads are in flight (pushed and not completed). Events still pending
# when the batch is done are skipped; a skipped scale-down fails the run.
read -ra PLAN <<<"$SCALE_PLAN"
for s in "${PLAN[@]}"; do
	if [[ $s == -* ]]; then
		DOWN_PLANNED=$((DOWN_PLANNED + 1))
	fi
done
last_event=$T0
i=0
while ((i < ${#PLAN[@]})); do
	tick 0.1
	alive "$PUSHER" || [[ -f $WORK/push_done ]] || die "the pusher died (see $WORK/push.log)"
	look_busy
	done_n=$(completed_count)
	pushed_n=$(pushed_count)
	if ((done_n >= THREADS)) || { [[ -n $WAITER ]] && ! alive "$WAITER"; }; then
		break # the batch is over
	fi
	((pushed_n > done_n)) || continue # nothing in flight yet
	if awk -v a="$EPOCHREALTIME" -v b="$last_event" -v s="$STEP" 'BEGIN { exit !(a < b + s) }' &&
		((2 * done_n * (${#PLAN[@]} + 1) < (i + 1) * THREADS)); then
		continue # not due
	fi
	s=${PLAN[i]}
	k=${s:1}
	if [[ $s == +* ]]; then
		for ((j = 0; j < k; j++)); do
			start_worker
		done
	else
		if ((k > ${#LIVE[@]} - 1)); then
			log "scale $s: keeping one worker serving, stopping $((${#LIVE[@]} - 1))"
			k=$((${#LIVE[@]} - 1))
		fi
		for ((j = 0; j < k; j++)); do
			stop_worker planned
		done
		if ((k > 0)); then
			DOWN_LANDED=$((DOWN_LANDED + 1))
		fi
	fi
	event "scale $s" "$pushed_n" "$done_n"
	last_event=$EPOCHREALTIME
	i=$((i + 1))
done
for s in "${PLAN[@]:i}"; do
	log "scale $s skipped: the batch finished first"
	EVENTS+=("$(printf '+%6ss  %s  scale %s skipped: the batch finished first' "$(since "$T0")" "$(date +%H:%M:%S)" "$s")")
done

# Then wait for the batch (spool thread wait has its own --timeout; this
# deadline only guards against a hung process).
HARD_DEADLINE=$((SECONDS + TIMEOUT + 60))
while [[ -z $WAITER ]] || alive "$WAITER"; do
	alive "$PUSHER" || [[ -f $WORK/push_done ]] || die "the pusher died (see $WORK/push.log)"
	((SECONDS < HARD_DEADLINE)) || die "the batch did not finish within $((TIMEOUT + 60))s"
	tick
done
wait "$WAITER" || true
unset 'OWNED[$WAITER]'
PUSHED=$(pushed_count)
PUSH_S=$(awk -v a="$T0" -v b="$(<"$WORK/push_done")" 'BEGIN { printf "%.1f", b - a }')
WALL=$(awk -v a="$T0" -v b="$(<"$WORK/batch_done")" 'BEGIN { printf "%.1f", b - a }')
if ((PUSHED < THREADS)); then
	log "$((THREADS - PUSHED)) pushes failed; last errors:"
	tail -n 5 "$WORK/push.log" || true
fi
mapfile -t IDS <"$WORK/ids"
event "batch done"

# Stop the rest of the fleet gracefully and collect every exit status.
while ((${#LIVE[@]} > 0)); do
	stop_worker
done
event "fleet stopped"
DRAIN_DEADLINE=$((SECONDS + ${SHUTDOWN_TIMEOUT%s} + 15))
while ((${#DRAINING[@]} > 0 && SECONDS < DRAIN_DEADLINE)); do
	sleep 0.1
	reap
done
if ((${#DRAINING[@]} > 0)); then
	UNCLEAN_EXITS=$((UNCLEAN_EXITS + ${#DRAINING[@]}))
	log "${#DRAINING[@]} worker(s) did not exit within the shutdown timeout"
fi

# `spool thread wait` prints "ID  →  FINAL_ID  STATUS" per thread.
declare -A STATUS=()
while read -r id _ _ status; do
	if [[ -n ${id:-} ]]; then
		STATUS[$id]=$status
	fi
done <"$WORK/wait.txt"
COMPLETED=0
declare -A BY_STATUS=()
for id in "${IDS[@]}"; do
	st=${STATUS[$id]:-unknown}
	BY_STATUS[$st]=$((${BY_STATUS[$st]:-0} + 1))
	if [[ $st == completed ]]; then
		COMPLETED=$((COMPLETED + 1))
	fi
done
LOST=$((THREADS - COMPLETED))

echo
echo "== spool fleet =="
printf 'threads pushed:    %d of %d (directive %s, push took %ss)\n' "$PUSHED" "$THREADS" "$DIRECTIVE" "$PUSH_S"
printf 'workers over time: (concurrency %d, shutdown timeout %s)\n' "$CONCURRENCY" "$SHUTDOWN_TIMEOUT"
printf '  %s\n' "${EVENTS[@]}"
BREAKDOWN=""
for st in "${!BY_STATUS[@]}"; do
	BREAKDOWN+="$st=${BY_STATUS[$st]} "
done
printf 'completions:       %d completed (%s)\n' "$COMPLETED" "${BREAKDOWN% }"
printf 'wall time:         %ss (first push to batch done)\n' "$WALL"
printf 'throughput:        %s threads/s\n' "$(awk -v n="$COMPLETED" -v t="$WALL" 'BEGIN { printf "%.2f", (t > 0 ? n / t : 0) }')"
printf 'worker exits:      %d started, %d unclean, slowest drain %ss\n' "$((NEXT_WORKER - 1))" "$UNCLEAN_EXITS" "$DRAIN_MAX"
printf 'scale-downs:       %d of %d planned landed with threads in flight; the workers they stopped were running %d activations\n' \
	"$DOWN_LANDED" "$DOWN_PLANNED" "$RAN_AT_STOP"
printf 'handed back:       %d activations by workers scaled down mid-batch, %d at the final stop\n' "$HANDED_BACK" "$HANDED_BACK_END"
if ((DOWN_LANDED < DOWN_PLANNED)); then
	echo "SCALE-DOWN MISSED: $((DOWN_PLANNED - DOWN_LANDED)) of $DOWN_PLANNED planned scale-downs never landed while threads were in flight"
fi
if ((LOST == 0)); then
	echo "lost: 0"
else
	echo "LOST: $LOST threads did not complete (ids and statuses in $WORK/wait.txt)"
fi
((LOST == 0 && UNCLEAN_EXITS == 0 && DOWN_LANDED == DOWN_PLANNED))
