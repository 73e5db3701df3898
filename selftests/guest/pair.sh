# shellcheck shell=bash
# Helpers for scripts run by scripts/vm-pair.sh (sourced, with selftests/guest/lib.sh): the
# link to the other guest, and a way for the two guests to wait for each other.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin

# Brings up the link (the NIC with our MAC) with our addresses; prints its name.
pair_link() {
	local mac dev
	[[ $PAIR_ROLE == a ]] && mac=52:54:00:10:00:01 || mac=52:54:00:10:00:02
	dev=$(ip -o link | awk -v m="$mac" '$0 ~ m { sub(":", "", $2); print $2; exit }')
	local me peer
	[[ $PAIR_ROLE == a ]] && me=1 peer=2 || me=2 peer=1
	ip addr add "10.10.0.$me/24" dev "$dev"
	ip -6 addr add "fd10::$me/64" dev "$dev" nodad
	ip link set "$dev" up
	PAIR_DEV=$dev
	PAIR_PEER_IP=10.10.0.$peer
	PAIR_MY_IP=10.10.0.$me
	# shellcheck disable=SC2034 # for the scripts that source this file
	PAIR_PEER_IP6=fd10::$peer PAIR_MY_IP6=fd10::$me
}

# Waits (up to S seconds) until the peer answers ping: both guests are up and the link works.
pair_wait_peer() {
	local deadline=$((SECONDS + ${1:-300}))
	until ping -c1 -W1 "$PAIR_PEER_IP" >/dev/null 2>&1; do
		((SECONDS < deadline)) || return 1
	done
}

# Waits until port P listens on this host, over TCP or rdma_cm (a server we started is ready;
# pair_exchange restarted the rdma_cm trace before starting it, see cm_listening).
wait_listening() {
	local deadline=$((SECONDS + ${2:-120}))
	# PORT "mark:FILE": the server side says it is ready by creating FILE in PAIR_RESULTS.
	until if [[ $1 == mark:* ]]; then [[ -e $PAIR_RESULTS/${1#mark:} ]]; else
		tcp_listening "$1" || cm_listening "$1"
	fi; do
		((SECONDS < deadline)) || return 1
		nap 0.1
	done
}

# The helpers below also need selftests/guest/lib.sh (reset_modules, wait_for, gid_index).

# The index of the RoCEv2 GID of our IPv4 address on ib device $1.
ipv4_gid_index() {
	local octets
	IFS=. read -ra octets <<<"$PAIR_MY_IP"
	gid_index "$1" "0000:0000:0000:0000:0000:ffff:$(printf '%02x%02x:%02x%02x' "${octets[@]}")"
}

# Both guests reach the named point (marker files in the shared results directory).
pair_barrier() {
	local peer=a
	[[ $PAIR_ROLE == a ]] && peer=b
	: >"$PAIR_RESULTS/$PAIR_ROLE.$1"
	local deadline=$((SECONDS + 900))
	until [[ -e $PAIR_RESULTS/$peer.$1 ]]; do
		((SECONDS < deadline)) || return 1
		nap 0.1
	done
}

# Brings up STACK (rxe_rs or rdma_rxe) on the link; sets DEV and GID.
pair_stack_up() {
	local t0=$SECONDS
	cm_trace_restart # (a failure here must not show the last exchange's events)
	reset_modules
	local type=rxe_rs t1=$SECONDS
	DEV=rxers0
	[[ $1 == rdma_rxe ]] && type=rxe DEV=rxe0
	GID=
	if ! rdma link add "$DEV" type "$type" netdev "$PAIR_DEV"; then
		echo "# rdma link add $DEV type $type failed; RDMA drivers loaded: $(for m in rxe_rs rdma_rxe; do module_loaded $m && echo -n "$m "; done)"
	elif ! wait_for 120 ipv4_gid_index "$DEV" >/dev/null; then
		echo "# $DEV has no GID for $PAIR_MY_IP after 120 s"
	else
		GID=$(ipv4_gid_index "$DEV")
		echo "# $DEV up: modules unloaded in $((t1 - t0)) s, link and GID $GID in $((SECONDS - t1)) s"
		return 0
	fi
	pair_diagnose
	return 1
}

# Runs FUNC MINE LABEL for each of the three pairings in turn, MINE being this side's stack:
# rxe_rs on both ends, rxe_rs (A) with rdma_rxe (B), and rdma_rxe (A) with rxe_rs (B); or for
# those PAIR_PAIRINGS names ("A-B ...").
pair_each_pairing() {
	local a b p
	for p in ${PAIR_PAIRINGS:-rxe_rs-rxe_rs rxe_rs-rdma_rxe rdma_rxe-rxe_rs}; do
		a=${p%-*} b=${p#*-}
		if [[ $PAIR_ROLE == a ]]; then "$1" "$a" "$a<->$b"; else "$1" "$b" "$a<->$b"; fi
	done
}

# Brings up STACK here and waits for the peer to bring up its own (barrier TAG-up). Fails when
# either side failed, so that neither goes on to exchanges the other will not join.
pair_stack_up_both() {
	pair_stack_up "$1" || : >"$PAIR_RESULTS/$PAIR_ROLE.$2-down"
	pair_barrier "$2-up" || return 1
	[[ ! -e $PAIR_RESULTS/a.$2-down && ! -e $PAIR_RESULTS/b.$2-down ]]
}

# One exchange CASE between the guests, after a barrier: A runs COMMAND... as the server, B runs
# COMMAND... PEER_IP as the client once the server listens on TCP port PAIR_PORT (18515, the
# tools' default), and again if it could not connect. Sets PAIR_OUT to the output (also appended
# to $PAIR_RESULTS/$PAIR_ROLE.out; the tail is shown) and returns the command's status. Each side
# marks when it is done; a side still running 60 s after its peer is done is stopped, so a side
# that fails at once costs a minute, not the whole timeout.
pair_exchange() {
	local case=$1 peer=a
	shift
	[[ $PAIR_ROLE == a ]] && peer=b
	local t0=$SECONDS
	pair_barrier "$case" || { echo "# the peer never reached $case"; return 1; }
	local t1=$SECONDS
	cm_trace_restart
	local done_mark=$PAIR_RESULTS/$PAIR_ROLE.$case.done peer_done=$PAIR_RESULTS/$peer.$case.done
	local listening=$PAIR_RESULTS/a.$case.listening
	local limit=${PAIR_CASE_TIMEOUT:-150} rc
	if [[ $PAIR_ROLE == a ]]; then
		# A client started before the server listens fails to connect, and starting a tool
		# again costs seconds in a TCG guest: tell B when to start.
		(wait_listening "${PAIR_PORT:-18515}" "$limit" && : >"$listening") &
		local watcher=$!
		pair_run_bounded $((limit + 90)) "$peer_done" "$@"
		rc=$?
		kill "$watcher" 2>/dev/null
		wait "$watcher" 2>/dev/null
	else
		local deadline=$((SECONDS + limit))
		until [[ -e $listening || -e $peer_done ]] || ((SECONDS >= deadline)); do nap 0.1; done
		local try refused="couldn't connect|unable to connect|connection refused|rdma_cm_event_rejected|rdma_cm_event_unreachable|rdma_connect"
		for ((try = 0; try < ${PAIR_CLIENT_TRIES:-60}; try++)); do
			pair_run_bounded "$limit" "$peer_done" "$@" "$PAIR_PEER_IP"
			rc=$?
			[[ ${PAIR_OUT,,} =~ $refused ]] || break
			[[ -e $peer_done ]] && break
			nap 1
		done
	fi
	: >"$done_mark"
	echo "# $case: barrier $((t1 - t0)) s, exchange $((SECONDS - t1)) s"
	local lines
	mapfile -t lines <<<"$PAIR_OUT" # (its last 4 lines)
	printf '# %s\n' "${lines[@]:$((${#lines[@]} > 4 ? ${#lines[@]} - 4 : 0))}"
	echo "$PAIR_OUT" >>"$PAIR_RESULTS/$PAIR_ROLE.out"
	((rc == 0)) || pair_diagnose
	return $rc
}

# A perftest -R exchange (pair_exchange's arguments: CASE COMMAND...). The client runs once (no
# retry would find perftest's one-shot server as it was). When it lost perftest's own listen race
# (see perftest_lost_listen_race), which says nothing about the driver, both sides run the case
# once more, and that run is the result.
pair_exchange_perftest_cm() {
	local case=$1 rc tries=1
	# (UD over SIDR: a lost race shows as UNREACHABLE there, which the client retries as before.)
	[[ " $* " == *" -c UD "* ]] && tries=60
	PAIR_CLIENT_TRIES=$tries pair_exchange "$@"
	rc=$?
	if [[ $PAIR_ROLE == b ]] && ((rc != 0)) && perftest_lost_listen_race; then
		: >"$PAIR_RESULTS/b.$case.listen-race"
	fi
	pair_barrier "$case.verdict" || return 1
	if [[ -e $PAIR_RESULTS/b.$case.listen-race ]]; then
		echo "# $case: perftest's client asked before perftest's server listened (REJ, no listener): once more"
		PAIR_CLIENT_TRIES=$tries pair_exchange "$case-again" "${@:2}"
		rc=$?
	fi
	return $rc
}

# Runs COMMAND... into PAIR_OUT; stops it after LIMIT seconds, or 60 s after file PEER_DONE
# appears. Returns its status.
pair_run_bounded() {
	local limit=$1 peer_done=$2 out=/tmp/pair-exchange.$PAIR_ROLE.out
	shift 2
	rm -f "$out.rc"
	# The status file marks the end: the subshell waits for COMMAND itself, so the end is seen
	# at once whether or not this shell has reaped its children yet (kill -0 finds a zombie).
	# (A stop while it is written leaves no number in it: then wait's status counts.)
	{
		"$@"
		echo $? >"$out.rc"
	} >"$out" 2>&1 &
	local pid=$! deadline=$((SECONDS + limit)) why=
	while [[ ! -e $out.rc ]] && kill -0 "$pid" 2>/dev/null; do
		[[ -e $peer_done ]] && ((deadline > SECONDS + 60)) && deadline=$((SECONDS + 60))
		if ((SECONDS >= deadline)); then
			why="still running after $limit s"
			[[ -e $peer_done ]] && why="still running 60 s after the peer was done"
			why+=" ($(pair_process_state "$pid"))"
			kill_tree "$pid"
			[[ -e $out.rc ]] && why+=" (it ended meanwhile)"
			break
		fi
		nap 0.1
	done
	# (No "Killed" line from the shell: the reason is in PAIR_OUT.)
	{ wait "$pid"; } 2>/dev/null
	local rc=$? status=
	[[ -e $out.rc ]] && read -r status <"$out.rc"
	[[ $status =~ ^[0-9]+$ ]] && rc=$status
	slurp PAIR_OUT "$out"
	[[ -z $why ]] || PAIR_OUT+=$'\n'"pair: $1 stopped: $why"
	return "$rc"
}

# Kills process PID and every process under it (COMMAND may be a shell function whose
# subshell runs the tool). Says which of them are still there a moment later (stuck in the
# kernel: they may still hold the device).
kill_tree() {
	local child p left=
	kill -STOP "$1" 2>/dev/null # (no new children meanwhile)
	local tree=("$1")
	mapfile -t -O 1 tree < <(pgrep -P "$1")
	for child in "${tree[@]:1}"; do
		kill_tree "$child"
	done
	kill -9 "$1" 2>/dev/null
	nap 0.5
	for p in "${tree[@]}"; do
		[[ $(cut -d' ' -f3 "/proc/$p/stat" 2>/dev/null) == [RSDT] ]] && left+=" $p"
	done
	[[ -z $left ]] || echo "# kill_tree: still there after kill -9:$left"
}

# Where the processes under PID (the subshell that runs COMMAND) are: state, wait channel and
# kernel stack, so that a process stuck in the kernel is told apart from one still working or
# a zombie.
pair_process_state() {
	local p sep=
	for p in $(pgrep -P "$1") $(pgrep -P "$(pgrep -d, -P "$1")" 2>/dev/null); do
		echo -n "${sep}pid $p $(cut -d' ' -f2,3 "/proc/$p/stat" 2>/dev/null) wchan $(cat "/proc/$p/wchan" 2>/dev/null)"
		echo -n " stack $(awk '{ print $2 }' "/proc/$p/stack" 2>/dev/null | head -8 | tr '\n' ' ')"
		sep="; "
	done
	[[ -n $sep ]] || echo -n "no process under the subshell $1: $(cut -d' ' -f2,3 "/proc/$1/stat" 2>/dev/null)"
}

# What a failed exchange needs explained: can we reach the peer, which RDMA links exist, and
# the kernel's last words.
pair_diagnose() {
	if ping -c1 -W2 "$PAIR_PEER_IP" >/dev/null 2>&1; then
		echo "# diagnose: $PAIR_PEER_IP answers ping"
	else
		echo "# diagnose: $PAIR_PEER_IP does not answer ping; neighbours: $(ip neigh show dev "$PAIR_DEV" | tr '\n' ';')"
	fi
	echo "# diagnose: rdma links: $(rdma link show 2>&1 | tr '\n' ';')"
	# The port counters and the connection manager's MAD counts (a REQ that got no answer shows
	# as tx retries here and as rx on the peer, or not), nonzero ones only.
	echo "# diagnose: counters: $(rdma statistic show 2>/dev/null | awk '{ for (i = 1; i <= NF; i++)
		if ($i ~ /^[a-z_]+$/ && $(i + 1) ~ /^[0-9]+$/) { if ($(i + 1) != 0) printf "%s=%s ", $i, $(i + 1); i++ }
		else printf "%s ", $i }')"
	local f cm=
	# (Per port since 5.14: /sys/class/infiniband/DEV/ports/N/cm_tx_msgs/req and so on.)
	for f in /sys/class/infiniband/*/ports/*/cm_{tx_msgs,tx_retries,rx_msgs,rx_duplicates}/*; do
		[[ -r $f && $(cat "$f") != 0 ]] && cm+="$(cut -d/ -f5,8,9 <<<"$f")=$(cat "$f") "
	done
	echo "# diagnose: cm: $cm"
	# This exchange's connection manager events: the first and the last ones.
	local events
	events=$(grep -v '^#' /sys/kernel/tracing/trace 2>/dev/null | sed 's/^ *//' | cut -c1-220)
	if (($(wc -l <<<"$events") > 50)); then
		events="$(head -n 25 <<<"$events")"$'\n...\n'"$(tail -n 25 <<<"$events")"
	fi
	[[ -n $events ]] && sed 's/^/# diagnose: trace: /' <<<"$events"
	dmesg | tail -n 5 | sed 's/^/# diagnose: dmesg: /'
}
