#!/usr/bin/env bash
# deploy/bench/fuse.sh: Nacre through FUSE against the library client, the
# local disk and go-fuse's own passthrough example (loopback), all in one
# run on this host, with fio for data and `nacre bench` for metadata. See
# deploy/bench/README.md. Run as root (drop_caches, FUSE mounts).
#
# Environment (defaults in brackets):
#   NACRE_BENCH_TMP           where the temporary directory goes: the local
#                             disk measured, loopback's backing dir and the
#                             cluster's data all live there [/tmp]
#   NACRE_BENCH_CACHE_MB      client max_cached_mb, for the mount and the
#                             library runs [128]
#   NACRE_BENCH_SEQ_SIZE      file size of each sequential job [2 x cache]
#   NACRE_BENCH_RAND_SIZE     region of the 4 KiB random runs [SEQ_SIZE]
#   NACRE_BENCH_RAND_RUNTIME  seconds of each random run [10]
#   NACRE_BENCH_MD_FILES      mdtest files per job [2000]
#   NACRE_BENCH_MD_JOBS       mdtest jobs (a directory each) [1]
#   NACRE_BENCH_STRIPES       stripe count of the Nacre files; 0 the file
#                             system's default (1), -1 all OSTs [0]
#   NACRE_BENCH_MOUNT_OPTS    more -o options for nacre mount and the library
#   NACRE_BENCH_LOV_BENCHTIME -benchtime of client/lov's BenchmarkStriped
#                             (the library against raw LNet); "" skips [512x]
#   NACRE_BIN                 a nacre binary to use instead of building one
#   NACRE_BENCH_KEEP          1 keeps the temporary directory [0]
#   NACRE_BENCH_UP_MOUNT      1 also measures the mount nacre up makes in
#                             its own process (--mount), on the servers'
#                             LNet through 0@lo: column "upfuse" [1]
#   NACRE_BENCH_NOBODY        the uid (and gid) the loopfd loopback and its
#                             fio run as [65534]
#   NACRE_BENCH_PAGE_REPORTING  "off": on a VM with free page reporting,
#                             turn it off for the run and back the guest's
#                             free memory first (see README.md) [leave it]
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
cache_mb=${NACRE_BENCH_CACHE_MB:-128}
seq_size=${NACRE_BENCH_SEQ_SIZE:-$((2 * cache_mb))M}
rand_size=${NACRE_BENCH_RAND_SIZE:-$seq_size}
rand_runtime=${NACRE_BENCH_RAND_RUNTIME:-10}
md_files=${NACRE_BENCH_MD_FILES:-2000}
md_jobs=${NACRE_BENCH_MD_JOBS:-1}
stripes=${NACRE_BENCH_STRIPES:-0}
extra_opts=${NACRE_BENCH_MOUNT_OPTS:-}
lov_benchtime=${NACRE_BENCH_LOV_BENCHTIME-512x}
up_mount=${NACRE_BENCH_UP_MOUNT:-1}
fsname=nacre

log() { printf '== %s\n' "$*" >&2; }
die() { printf 'fuse.sh: %s\n' "$*" >&2; exit 1; }

for t in fio go fusermount3; do command -v "$t" >/dev/null || die "needs $t"; done
if command -v jq >/dev/null; then
	json() { jq -r "$2" "$1"; }
else
	command -v python3 >/dev/null || die "needs jq or python3 to read fio's JSON"
	json() { # a jq path of the form .a[0].b.c
		python3 - "$1" "$2" <<-'EOF'
			import json, re, sys
			v = json.load(open(sys.argv[1]))
			for k in re.findall(r'\[(\d+)\]|\.(\w+)', sys.argv[2]):
			    v = v[int(k[0])] if k[0] else v[k[1]]
			print(v)
		EOF
	}
fi

tmp=$(mktemp -d "${NACRE_BENCH_TMP:-/tmp}/nacre-bench.XXXXXX")
bin=$tmp/bin
mkdir -p "$bin" "$tmp/data" "$tmp/mnt" "$tmp/upmnt" "$tmp/local" "$tmp/loop-orig" "$tmp/loop"
fuse_pids=() # the FUSE servers (nacre mount, loopback), stopped first
up_pid=""    # nacre up, stopped once nothing uses it
mounts=()
cleanup() {
	local rc=$? p
	set +e
	# SIGTERM makes both FUSE servers write back and unmount; wait for them
	# before stopping the cluster the Nacre mount writes back to.
	for p in "${fuse_pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
	for p in "${fuse_pids[@]}"; do
		for _ in $(seq 600); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$p" 2>/dev/null
		wait "$p" 2>/dev/null
	done
	for m in "${mounts[@]}"; do
		if grep -qs " $m " /proc/self/mountinfo; then fusermount3 -uz "$m" 2>/dev/null; fi
	done
	# nacre up unmounts its own mount (upmnt) at SIGTERM.
	if [ -n "$up_pid" ]; then kill -TERM "$up_pid" 2>/dev/null; wait "$up_pid" 2>/dev/null; fi
	if grep -qs " $tmp/upmnt " /proc/self/mountinfo; then fusermount3 -uz "$tmp/upmnt" 2>/dev/null; fi
	if [ -n "${pr_saved:-}" ]; then echo "$pr_saved" >"$pr"; fi
	if [ "${NACRE_BENCH_KEEP:-0}" = 1 ] || [ $rc -ne 0 ]; then
		log "logs and data kept in $tmp"
	else
		rm -rf "$tmp"
	fi
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# free_port prints a TCP port nothing listens on (on 127.0.0.0/8), from a
# range unlikely to be in use.
free_port() {
	local p
	while :; do
		p=$((20000 + RANDOM % 20000))
		case " ${used_ports:-} " in *" $p "*) continue ;; esac
		(exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null && continue
		used_ports="${used_ports:-} $p"
		echo "$p"
		return
	done
}

# wait_mount DIR PID: until DIR is a mount point (or PID died).
wait_mount() {
	for _ in $(seq 300); do
		grep -qs " $1 " /proc/self/mountinfo && return 0
		kill -0 "$2" 2>/dev/null || return 1
		sleep 0.1
	done
	return 1
}

can_drop=0
if sync && echo 3 2>/dev/null >/proc/sys/vm/drop_caches; then can_drop=1; else
	log "cannot write /proc/sys/vm/drop_caches (not root?): reads may come from the page cache"
fi
# drop: write back, then empty the kernel's page cache, so that the next
# run reads from the disk (the local file, loopback's backing file, the
# OSTs' object files) and the FUSE mounts keep no pages of their own.
drop() { sync; [ $can_drop = 0 ] || echo 3 >/proc/sys/vm/drop_caches; }

# Free page reporting (virtio-balloon): a VM that has it gives the memory
# it frees back to the host, and each page touched afresh costs a fault on
# the host: the page cache, tmpfs and every new heap then fill at a fraction
# of memory speed, and runs vary with what the kernel hands out.
pr=/sys/module/page_reporting/parameters/page_reporting_order
pr_state=absent pr_saved=""
if [ -r "$pr" ]; then
	pr_order=$(cat "$pr")
	pr_state=off
	[ "$pr_order" -gt 10 ] || pr_state="on (order $pr_order)"
	if [ "${NACRE_BENCH_PAGE_REPORTING:-}" = off ] && [ "$pr_order" -le 10 ]; then
		echo 11 >"$pr" || die "cannot turn free page reporting off (not root?)"
		pr_saved=$pr_order
		pr_state="off for this run (was order $pr_order)"
		# Back what is free now, once: write it to a tmpfs and drop it.
		free_mb=$(awk '/^MemAvailable:/ {print int($2 / 1024)}' /proc/meminfo)
		fill_mb=$((free_mb - 2048))
		if [ "$fill_mb" -gt 0 ]; then
			log "backing ${fill_mb} MiB of free memory (page reporting was on)"
			mkdir -p "$tmp/fill"
			if mount -t tmpfs -o "size=${fill_mb}m" tmpfs "$tmp/fill"; then
				dd if=/dev/zero of="$tmp/fill/f" bs=1M count="$fill_mb" status=none 2>/dev/null || true
				umount "$tmp/fill"
			fi
		fi
	fi
fi

log "build into $bin"
if [ -n "${NACRE_BIN:-}" ]; then cp "$NACRE_BIN" "$bin/nacre"; else (cd "$repo" && go build -o "$bin/nacre" ./cmd/nacre); fi
GOBIN=$bin go install github.com/hanwen/go-fuse/v2/example/loopback@v2.12.1
nacre=$bin/nacre
"$nacre" bench --help >/dev/null 2>&1 || die "this nacre has no 'bench' command"
have_fuse=1
"$nacre" mount --help >/dev/null 2>&1 || { have_fuse=0; log "this nacre has no 'mount' command: no FUSE figures"; }

grpc=$(free_port) http=$(free_port) etcdc=$(free_port) etcdp=$(free_port) lnetport=$(free_port)
src=127.0.0.1@tcp:$grpc:/$fsname
opts=max_cached_mb=$cache_mb${extra_opts:+,$extra_opts}
log "nacre up: MGS 127.0.0.1:$grpc, socklnd port $lnetport, data $tmp/data"
up_args=()
if [ "$up_mount" = 1 ]; then
	# Its own mount, in the servers' process: through 0@lo, as a Lustre
	# client on a server node.
	up_args=(--mount "$tmp/upmnt" --mount-options "$opts")
fi
"$nacre" up --data "$tmp/data" --fsname "$fsname" --no-auth --grpc-addr "127.0.0.1:$grpc" --http-addr "127.0.0.1:$http" \
	--etcd-client-url "http://127.0.0.1:$etcdc" --etcd-peer-url "http://127.0.0.1:$etcdp" --port "$lnetport" "${up_args[@]}" >"$tmp/up.log" 2>&1 &
up_pid=$!
for _ in $(seq 600); do
	grep -q '^ready' "$tmp/up.log" && break
	kill -0 $up_pid 2>/dev/null || { tail -20 "$tmp/up.log" >&2; die "nacre up failed"; }
	sleep 0.1
done
grep -q '^ready' "$tmp/up.log" || die "nacre up not ready after 60 s"
if [ "$up_mount" = 1 ]; then
	if ! grep -qs " $tmp/upmnt " /proc/self/mountinfo; then
		log "nacre up did not mount $tmp/upmnt: no upfuse figures"
		up_mount=0
	fi
fi

lib() { "$nacre" bench "$src" --port "$lnetport" -o "$opts" --log-level warn "$@" 2>>"$tmp/lib.log"; }
if [ "$stripes" != 0 ]; then
	for d in fio md fio-up md-up; do lib --workload mkdir --dir "$d" --stripe-count "$stripes"; done
fi
[ "$up_mount" = 1 ] && mkdir -p "$tmp/upmnt/fio-up" "$tmp/upmnt/md-up"

if [ $have_fuse = 1 ]; then
	log "nacre mount $src $tmp/mnt -o $opts"
	"$nacre" mount "$src" "$tmp/mnt" -o "port=$lnetport,$opts" >"$tmp/mount.log" 2>&1 &
	fuse_pids+=($!)
	if wait_mount "$tmp/mnt" $!; then
		mounts+=("$tmp/mnt")
		mkdir -p "$tmp/mnt/fio" "$tmp/mnt/md"
	else
		tail -20 "$tmp/mount.log" >&2
		log "nacre mount failed: no FUSE figures"
		have_fuse=0
	fi
fi
log "loopback $tmp/loop over $tmp/loop-orig"
"$bin/loopback" -q "$tmp/loop" "$tmp/loop-orig" >"$tmp/loopback.log" 2>&1 &
fuse_pids+=($!)
wait_mount "$tmp/loop" $! || { cat "$tmp/loopback.log" >&2; die "loopback did not mount"; }
mounts+=("$tmp/loop")

# loopfd: the same loopback, run as an unprivileged user. On a kernel
# with FUSE passthrough (6.9 and later) the root loopback above hands the
# kernel its backing files at open, and the kernel reads and writes them
# itself: the daemon never sees a read or a write, and "loop" measures
# the local disk through the kernel. Without CAP_SYS_ADMIN go-fuse cannot
# register backing files, so loopfd serves every read and write itself
# (splicing reads from its file descriptors): the ceiling of a Go FUSE
# daemon that moves the data. Its fio and mdtest run as that user too (a
# FUSE mount without allow_other is its owner's alone).
nobody=${NACRE_BENCH_NOBODY:-65534}
as_nobody=()
have_loopfd=0
if command -v setpriv >/dev/null && [ "$(id -u)" = 0 ]; then
	as_nobody=(setpriv --reuid="$nobody" --regid="$nobody" --clear-groups)
	chmod 711 "$tmp"
	mkdir -p "$tmp/loopfd" "$tmp/loopfd-orig"
	chown "$nobody:$nobody" "$tmp/loopfd" "$tmp/loopfd-orig"
	log "loopfd $tmp/loopfd over $tmp/loopfd-orig (uid $nobody: no kernel passthrough)"
	"${as_nobody[@]}" "$bin/loopback" -q "$tmp/loopfd" "$tmp/loopfd-orig" >"$tmp/loopfd.log" 2>&1 &
	fuse_pids+=($!)
	if wait_mount "$tmp/loopfd" $!; then
		mounts+=("$tmp/loopfd")
		"${as_nobody[@]}" mkdir -p "$tmp/loopfd/fio" "$tmp/loopfd/md"
		have_loopfd=1
	else
		tail -5 "$tmp/loopfd.log" >&2
		log "loopback as uid $nobody did not mount: no loopfd figures"
	fi
else
	log "not root or no setpriv: no loopfd figures"
fi

# The directory each side works in.
declare -A where=([fuse]=$tmp/mnt/fio [upfuse]=$tmp/upmnt/fio-up [local]=$tmp/local [loop]=$tmp/loop/fio [loopfd]=$tmp/loopfd/fio)
mkdir -p "$tmp/loop/fio"
sides=(lib local loop)
[ $have_loopfd = 1 ] && sides+=(loopfd)
[ "$up_mount" = 1 ] && sides=(upfuse "${sides[@]}")
[ $have_fuse = 1 ] && sides=(fuse "${sides[@]}")
declare -A R # R[workload,side] = the figure

# run_fio SIDE WORKLOAD RW BS JOBS SIZE NAME [RUNTIME]
run_fio() {
	local side=$1 w=$2 rw=$3 bs=$4 jobs=$5 size=$6 name=$7 runtime=${8:-} out dir
	out=$tmp/fio-$w-$side.json
	local args=(--name="$name" --directory="${where[$side]}" --rw="$rw" --bs="$bs" --numjobs="$jobs" --size="$size"
		--ioengine=psync --direct=0 --fallocate=none --group_reporting --output-format=json --output="$out")
	case $rw in *write) args+=(--end_fsync=1) ;; esac
	[ -z "$runtime" ] || args+=(--time_based --runtime="$runtime")
	if [ "$side" = loopfd ]; then
		# The report comes on standard output, which this shell opens:
		# the user cannot open a file in $tmp.
		local a as=()
		for a in "${args[@]}"; do
			case $a in --output=*) ;; *) as+=("$a") ;; esac
		done
		"${as_nobody[@]}" fio "${as[@]}" >"$out" 2>>"$tmp/fio.log" || { tail -5 "$tmp/fio.log" >&2; die "fio $w on $side failed"; }
	else
		fio "${args[@]}" >/dev/null 2>>"$tmp/fio.log" || { tail -5 "$tmp/fio.log" >&2; die "fio $w on $side failed"; }
	fi
	dir=read
	case $rw in *write) dir=write ;; esac
	local bw iops
	bw=$(json "$out" ".jobs[0].$dir.bw_bytes")
	iops=$(json "$out" ".jobs[0].$dir.iops")
	case $rw in rand*) R[$w,$side]=$(awk -v v="$iops" 'BEGIN{printf "%.0f", v}') ;;
	*) R[$w,$side]=$(awk -v v="$bw" 'BEGIN{printf "%.1f", v/1048576}') ;; esac
}

# run_lib WORKLOAD BENCH-WORKLOAD BS JOBS SIZE NAME [RUNTIME]
run_lib() {
	local w=$1 bw=$2 bs=$3 jobs=$4 size=$5 name=$6 runtime=${7:-10} line key=MiB/s
	local args=(--workload "$bw" --bs "$bs" --jobs "$jobs" --size "$size" --name "$name" --dir lib --runtime "${runtime}s")
	[ "$stripes" = 0 ] || args+=(--stripe-count "$stripes")
	line=$(lib "${args[@]}") || { tail -5 "$tmp/lib.log" >&2; die "nacre bench $w failed"; }
	case $bw in rand*) key=IOPS ;; esac
	R[$w,lib]=$(sed -n "s|.* $key=\([0-9.]*\).*|\1|p" <<<"$line")
	[ "$key" = MiB/s ] || R[$w,lib]=$(awk -v v="${R[$w,lib]}" 'BEGIN{printf "%.0f", v}')
}

# rw_map turns fio's rw into nacre bench's workload.
rw_map() { case $1 in write) echo seqwrite ;; read) echo seqread ;; *) echo "$1" ;; esac; }

# data WORKLOAD RW BS JOBS SIZE NAME [RUNTIME]: one workload on every side
# in turn, each after the page cache was dropped.
data() {
	local w=$1 rw=$2 bs=$3 jobs=$4 size=$5 name=$6 runtime=${7:-} s
	for s in "${sides[@]}"; do
		drop
		case $s in
		lib) run_lib "$w" "$(rw_map "$rw")" "$bs" "$jobs" "$size" "$name" "$runtime" ;;
		*) run_fio "$s" "$w" "$rw" "$bs" "$jobs" "$size" "$name" "$runtime" ;;
		esac
		printf '%-12s %-6s %s\n' "$w" "$s" "${R[$w,$s]}" >&2
	done
}
data seqwrite-1j write 1M 1 "$seq_size" seq1
data seqread-1j read 1M 1 "$seq_size" seq1
data seqwrite-4j write 1M 4 "$seq_size" seq4
data seqread-4j read 1M 4 "$seq_size" seq4
# The random runs work in seq1's file, so that reads find data, not holes.
data randwrite-4k randwrite 4k 1 "$rand_size" seq1 "$rand_runtime"
data randread-4k randread 4k 1 "$rand_size" seq1 "$rand_runtime"

# mdtest: nacre bench --path on each mount point (the same code on every
# side), and the library.
declare -A mdpath=([fuse]=$tmp/mnt [upfuse]=$tmp/upmnt/md-up [local]=$tmp/local [loop]=$tmp/loop [loopfd]=$tmp/loopfd)
for s in "${sides[@]}"; do
	drop
	if [ "$s" = lib ]; then
		out=$(lib --workload mdtest --jobs "$md_jobs" --files "$md_files" --dir md) || { tail -5 "$tmp/lib.log" >&2; die "mdtest on lib failed"; }
	elif [ "$s" = loopfd ]; then
		out=$("${as_nobody[@]}" "$nacre" bench --path "${mdpath[$s]}" --dir md --workload mdtest --jobs "$md_jobs" --files "$md_files" 2>>"$tmp/lib.log") ||
			{ tail -5 "$tmp/lib.log" >&2; die "mdtest on $s failed"; }
	else
		out=$("$nacre" bench --path "${mdpath[$s]}" --dir md --workload mdtest --jobs "$md_jobs" --files "$md_files" 2>>"$tmp/lib.log") ||
			{ tail -5 "$tmp/lib.log" >&2; die "mdtest on $s failed"; }
	fi
	for ph in create stat unlink; do
		R[mdtest-$ph,$s]=$(sed -n "s|.* mdtest\.$ph .* ops/s=\([0-9.]*\).*|\1|p" <<<"$out" | awk '{printf "%.0f", $1}')
		printf '%-12s %-6s %s\n' "mdtest-$ph" "$s" "${R[mdtest-$ph,$s]}" >&2
	done
done

# The library against raw LNet: client/lov's benchmark, which measures
# both in one run (its own cluster in the test process).
lov_w=- lov_r=- lov_wl=- lov_rl=-
if [ -n "$lov_benchtime" ]; then
	log "go test -bench BenchmarkStriped -benchtime $lov_benchtime ./client/lov"
	drop
	if ! (cd "$repo" && go test -run '^$' -bench '^BenchmarkStriped$' -benchtime "$lov_benchtime" ./client/lov) >"$tmp/lov.log" 2>&1; then
		tail -20 "$tmp/lov.log" >&2
		log "BenchmarkStriped failed: no library-vs-LNet figures"
	fi
	metric() { awk -v b="BenchmarkStriped/$1" -v u="$2" '$1 ~ "^"b"(-[0-9]+)?$" { for (i = 2; i <= NF; i++) if ($i == u) print $(i-1) }' "$tmp/lov.log"; }
	lov_w=$(metric write x-vs-lnet) lov_r=$(metric read x-vs-lnet)
	lov_w=${lov_w:--} lov_r=${lov_r:--}
	lov_wl="$(metric write MB/s) MB/s vs LNet $(metric write lnet-MB/s) MB/s"
	lov_rl="$(metric read MB/s) MB/s vs LNet $(metric read lnet-MB/s) MB/s"
fi

# The table.
ratio() { awk -v a="${1:--}" -v b="${2:--}" 'BEGIN{ if (a == "-" || b == "-" || b + 0 == 0) print "-"; else printf "%.2f", a / b }'; }
verdict() { awk -v r="$1" -v g="$2" 'BEGIN{ if (r == "-") print "n/a"; else print (r + 0 >= g + 0) ? "PASS" : "MISS" }'; }
echo
echo "Nacre benchmark, $(date -u +%FT%TZ), $(nproc) CPUs; seq files $seq_size per job, random region $rand_size," \
	"${rand_runtime}s; max_cached_mb=$cache_mb; stripes ${stripes/#0/default}; page cache dropped before every run: $([ $can_drop = 1 ] && echo yes || echo NO);" \
	"free page reporting: $pr_state"
echo "units: seq MiB/s, rand IOPS, mdtest ops/s; fuse = nacre mount (its own process, over socklnd), upfuse = nacre up --mount (the servers' process, through 0@lo), lib = library client (nacre bench), loop = go-fuse loopback over the local disk (as root: the kernel's FUSE passthrough where it has one), loopfd = the same loopback as uid $nobody (no passthrough: the daemon serves the data)"
fmt='%-16s %10s %10s %10s %10s %10s %10s | %9s %8s %11s %10s %9s %11s %13s\n'
# shellcheck disable=SC2059
printf "$fmt" workload fuse upfuse lib local loop loopfd fuse/loop fuse/lib upfuse/loop upfuse/lib lib/local fuse/loopfd upfuse/loopfd
ws=(seqwrite-1j seqread-1j seqwrite-4j seqread-4j randwrite-4k randread-4k mdtest-create mdtest-stat mdtest-unlink)
for w in "${ws[@]}"; do
	f=${R[$w,fuse]:--} u=${R[$w,upfuse]:--} l=${R[$w,lib]:--} d=${R[$w,local]:--} p=${R[$w,loop]:--} q=${R[$w,loopfd]:--}
	# shellcheck disable=SC2059
	printf "$fmt" "$w" "$f" "$u" "$l" "$d" "$p" "$q" "$(ratio "$f" "$p")" "$(ratio "$f" "$l")" "$(ratio "$u" "$p")" "$(ratio "$u" "$l")" "$(ratio "$l" "$d")" \
		"$(ratio "$f" "$q")" "$(ratio "$u" "$q")"
done
echo
echo "library vs raw LNet (client/lov BenchmarkStriped, 4 OSTs, 1 MiB I/O):"
echo "  write x-vs-lnet $lov_w ($lov_wl)"
echo "  read  x-vs-lnet $lov_r ($lov_rl)"
echo
echo "goals:"
for m in fuse upfuse; do
	[ "$m" = upfuse ] && [ "$up_mount" != 1 ] && continue
	for w in seqwrite-1j seqread-1j seqwrite-4j seqread-4j; do
		r=$(ratio "${R[$w,$m]:--}" "${R[$w,loop]:--}")
		printf '  %-4s %-13s %-11s %5s >= 0.8\n' "$(verdict "$r" 0.8)" "$w" "$m/loop" "$r"
		r=$(ratio "${R[$w,$m]:--}" "${R[$w,lib]:--}")
		printf '  %-4s %-13s %-11s %5s >= 0.7\n' "$(verdict "$r" 0.7)" "$w" "$m/lib" "$r"
	done
	r=$(ratio "${R[mdtest-create,$m]:--}" "${R[mdtest-create,loop]:--}")
	printf '  %-4s %-13s %-11s %5s >= 0.5\n' "$(verdict "$r" 0.5)" mdtest-create "$m/loop" "$r"
done
if [ $have_loopfd = 1 ]; then
	echo "against a go-fuse daemon that serves the data itself (not a goal of the issue; see loopfd above):"
	for m in fuse upfuse; do
		[ "$m" = upfuse ] && [ "$up_mount" != 1 ] && continue
		for w in seqwrite-1j seqread-1j seqwrite-4j seqread-4j; do
			printf '  info %-13s %-13s %5s\n' "$w" "$m/loopfd" "$(ratio "${R[$w,$m]:--}" "${R[$w,loopfd]:--}")"
		done
	done
fi
printf '  %-4s %-13s %-11s %5s >= 0.8\n' "$(verdict "${lov_w:--}" 0.8)" lov-write lib/lnet "${lov_w:--}"
printf '  %-4s %-13s %-11s %5s >= 0.8\n' "$(verdict "${lov_r:--}" 0.8)" lov-read lib/lnet "${lov_r:--}"
