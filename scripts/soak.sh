#!/usr/bin/env bash
# Soak under load (issue 34): one learner training MaskedCartPole-v1 with 32 local actors and
# 4 remote ones (each in its own network namespace, joined by a veth pair, as tests/remote.rs
# sets them up), while actors are SIGKILLed or SIGSTOPped (SIGCONT 5-20 s later) at random
# every ~30 s and the learner is killed and resumed every ~10 min (alternately SIGKILL, a
# crash, and SIGTERM, a clean end whose summary.json is kept).
#
#   scripts/soak.sh [--minutes N] [--local N] [--remote N] [--actor-every S]
#                   [--learner-every S] [--sample-every S] [--out DIR] [--profile release|debug]
#                   [--seed S]
#
# Defaults: 60 minutes, 32 local, 4 remote, an actor fault every 30 s (+-50%), a learner
# restart every 600 s, a sample every 10 s, output in runs/soak-<unix time>/, the release
# binaries (built first: `cargo build --release --bins`).
#
# Remote actors need root (network namespaces). Without root the script runs local actors
# only and says so, unless RECUR_REQUIRE_NETNS is set, which makes it fail (as tests/remote.rs).
#
# What it records, in OUT/:
#   samples.jsonl   every --sample-every s: the learner's RSS (VmRSS, KiB), open FDs, threads
#                   (from /proc/PID), its live actor children, the segment (learner process)
#   events.jsonl    every fault, learner restart, remote actor exit, orphan, unexpected exit
#   summary-K.json  the learner's summary.json of each segment that ended with SIGTERM (the
#                   SIGKILLed ones leave none: what they held past the checkpoint is lost by
#                   design, and their chunk ledger with them)
#   learner-K.log, remote-I.log, run/ (the run directory)
# and prints one JSON line per check plus a markdown table: per verified segment and
# incarnation, `chunks == last_seq + 1`, no `seq_errors`, no `duplicates`, nothing `foreign`
# (assert_lossless in tests/remote.rs), `corrupted` and `rejected` (a corrupt chunk is counted
# there, never accepted); every resume succeeded; local actors gone within 30 s of each learner
# death (orphans); no shared-memory segment of any of our learners left at the end; the RSS
# slope (KiB/min, least squares, per segment after its first 60 s) and FD counts over time.
# Exit status 0 when every check holds, 1 otherwise, 2 on bad usage or setup.
set -euo pipefail
cd "$(dirname "$0")/.."

minutes=60 local_n=32 remote_n=4 actor_every=30 learner_every=600 sample_every=10
profile=release out="" seed=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --minutes) minutes=$2; shift 2 ;;
    --local) local_n=$2; shift 2 ;;
    --remote) remote_n=$2; shift 2 ;;
    --actor-every) actor_every=$2; shift 2 ;;
    --learner-every) learner_every=$2; shift 2 ;;
    --sample-every) sample_every=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --profile) profile=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    -h|--help) sed -n '2,33p' "$0"; exit 0 ;;
    *) echo "soak.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

. scripts/target_dir.sh
bin="$(target_dir)/$profile"
for b in recur-learner recur-actor; do
  [[ -x $bin/$b ]] || { echo "soak.sh: $bin/$b is missing: cargo build --$profile --bins" >&2; exit 2; }
done
out=${out:-runs/soak-$(date +%s)}
mkdir -p "$out"
out=$(cd "$out" && pwd)
run="$out/run"
events="$out/events.jsonl"
samples="$out/samples.jsonl"
: >"$events"; : >"$samples"
RANDOM=$seed
start=$(date +%s.%N)

now() { date +%s.%N; }
# Alive and not a zombie (an exited child stays one until it is waited for).
alive() { [[ -r /proc/$1/stat && $(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) != Z ]]; }
elapsed() { awk -v a="$(now)" -v b="$start" 'BEGIN { printf "%.1f", a - b }'; }
event() { # event NAME [JSON fields without braces]
  local extra=${2:+,$2}
  printf '{"t":%s,"event":"%s"%s}\n' "$(elapsed)" "$1" "$extra" >>"$events"
}
say() { printf '[soak %6ss] %s\n' "$(elapsed)" "$*" >&2; }

# --- network namespaces (remote actors) -----------------------------------------------------
ns_names=() host_ifs=() host_ips=()
netns_up() {
  local i name host_if peer base
  base="10.233.$(($$ % 250))"
  for ((i = 0; i < remote_n; i++)); do
    name="rcs$(($$ % 100000))x$i"; host_if="rsh$(($$ % 100000))x$i"; peer="rsa$(($$ % 100000))x$i"
    ip netns add "$name" || return 1
    ns_names+=("$name"); host_ifs+=("$host_if"); host_ips+=("$base.$((4 * i + 1))")
    ip link add "$host_if" type veth peer name "$peer" &&
      ip link set "$peer" netns "$name" &&
      ip addr add "$base.$((4 * i + 1))/30" dev "$host_if" &&
      ip link set "$host_if" up &&
      ip -n "$name" addr add "$base.$((4 * i + 2))/30" dev "$peer" &&
      ip -n "$name" link set "$peer" up &&
      ip -n "$name" link set lo up || return 1
  done
}
netns_down() {
  local i
  for ((i = 0; i < ${#ns_names[@]}; i++)); do
    ip link del "${host_ifs[i]}" 2>/dev/null || true
    ip netns del "${ns_names[i]}" 2>/dev/null || true
  done
}

if [[ $remote_n -gt 0 ]]; then
  if [[ $EUID -ne 0 ]] || ! netns_up; then
    netns_down
    if [[ -n ${RECUR_REQUIRE_NETNS:-} ]]; then
      echo "soak.sh: RECUR_REQUIRE_NETNS is set but network namespaces cannot be created (root?)" >&2
      exit 2
    fi
    say "network namespaces are not available here (run as root): local actors only"
    event netns_unavailable
    remote_n=0
  fi
fi

# --- the learner ----------------------------------------------------------------------------
port=$((20000 + $$ % 20000))
learner=0 segment=0 learner_pids=() learner_ok=1 ending=0
start_learner() {
  local args=(train --actors "$local_n" --quiet)
  [[ $remote_n -gt 0 ]] && args+=(--listen "0.0.0.0:$port")
  if [[ $segment -eq 0 ]]; then
    args+=(--config configs/masked_cartpole.toml --run-dir "$run" --seed "$seed"
      --frames 1000000000000 --set run.checkpoint_every=10 --set eval.every_frames=500000
      --set run.stop_at_target=false)
    # A learner that detects stalled local actors: a 10 s bound, so that the 5-20 s SIGSTOPs
    # fall on both sides of it.
    if grep -q stall_timeout_s "$bin/recur-learner"; then
      args+=(--set collector.stall_timeout_s=10)
    fi
  else
    args+=(--resume "$run")
  fi
  RUST_LOG=info "$bin/recur-learner" "${args[@]}" \
    >"$out/learner-$segment.stdout" 2>"$out/learner-$segment.log" &
  learner=$!
  learner_pids+=("$learner")
  event learner_start "\"segment\":$segment,\"pid\":$learner"
  say "learner segment $segment started (pid $learner)"
}

# --- remote actors: one restart loop per namespace (the launcher's job) ----------------------
remote_loop() { # remote_loop I
  local i=$1 id=$((local_n + $1)) pid rc
  while [[ ! -e $out/stop ]]; do
    if [[ -s $run/token ]]; then
      ip netns exec "${ns_names[i]}" "$bin/recur-actor" --connect "tcp://${host_ips[i]}:$port" \
        --token-file "$run/token" --actor-id "$id" >>"$out/remote-$i.log" 2>&1 &
      pid=$!
      echo "$pid" >"$out/remote-$i.pid"
      rc=0; wait "$pid" 2>/dev/null || rc=$?
      event remote_exit "\"actor\":$id,\"pid\":$pid,\"rc\":$rc"
    fi
    sleep 1
  done
}

# --- faults ---------------------------------------------------------------------------------
stopped=() # "PID CONT_AT" pairs awaiting SIGCONT
local_actors() { pgrep -P "$learner" -x recur-actor 2>/dev/null || true; }
remote_actors() {
  local i p
  for ((i = 0; i < remote_n; i++)); do
    p=$(cat "$out/remote-$i.pid" 2>/dev/null || true)
    [[ -n $p ]] && alive "$p" && echo "$p"
  done
  return 0
}
is_stopped() { [[ $(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) == T ]]; }
fault() {
  local victims victim kind sig
  mapfile -t victims < <(local_actors; remote_actors)
  [[ ${#victims[@]} -gt 0 ]] || return 0
  victim=${victims[RANDOM % ${#victims[@]}]}
  kind=local
  pgrep -P "$learner" -x recur-actor | grep -qx "$victim" || kind=remote
  if ((RANDOM % 2)) && ! is_stopped "$victim"; then
    sig=STOP
    stopped+=("$victim $(($(date +%s) + 5 + RANDOM % 16))")
  else
    sig=KILL
  fi
  kill -s "$sig" "$victim" 2>/dev/null || return 0
  event fault "\"signal\":\"$sig\",\"pid\":$victim,\"kind\":\"$kind\",\"segment\":$segment"
}
cont_due() { # cont_due [all]
  local keep=() e pid at
  for e in "${stopped[@]+"${stopped[@]}"}"; do
    read -r pid at <<<"$e"
    if [[ ${1:-} == all || $(date +%s) -ge $at ]]; then
      kill -s CONT "$pid" 2>/dev/null && event cont "\"pid\":$pid"
    else
      keep+=("$e")
    fi
  done
  stopped=("${keep[@]+"${keep[@]}"}")
}

sample() {
  local rss fds threads children
  [[ -d /proc/$learner ]] || return 0
  rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$learner/status" 2>/dev/null || echo 0)
  threads=$(awk '/^Threads:/ {print $2}' "/proc/$learner/status" 2>/dev/null || echo 0)
  fds=$(find "/proc/$learner/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l || true)
  children=$(local_actors | wc -l)
  printf '{"t":%s,"segment":%d,"pid":%d,"rss_kib":%d,"fds":%d,"threads":%d,"local_actors":%d,"stopped":%d}\n' \
    "$(elapsed)" "$segment" "$learner" "${rss:-0}" "$fds" "${threads:-0}" "$children" \
    "${#stopped[@]}" >>"$samples"
}

# Waits up to 30 s for PIDS (the dead learner's actors) to exit; the ones left are orphans.
reap_orphans() {
  local pids=("$@") deadline=$(($(date +%s) + 30)) p alive t0
  t0=$(now)
  while :; do
    alive=()
    for p in "${pids[@]+"${pids[@]}"}"; do kill -0 "$p" 2>/dev/null && alive+=("$p"); done
    [[ ${#alive[@]} -eq 0 || $(date +%s) -ge $deadline ]] && break
    sleep 0.2
  done
  event actors_gone "\"segment\":$segment,\"actors\":${#pids[@]},\"orphans\":${#alive[@]},\"seconds\":$(awk -v a="$(now)" -v b="$t0" 'BEGIN{printf "%.1f", a-b}')"
  for p in "${alive[@]+"${alive[@]}"}"; do kill -s KILL "$p" 2>/dev/null || true; done
}

# Ends the current learner with SIG (KILL or TERM) and keeps its summary.
stop_learner() {
  local sig=$1 children rc=0 t0
  mapfile -t children < <(local_actors)
  t0=$(now)
  kill -s "$sig" "$learner" 2>/dev/null || true
  wait "$learner" 2>/dev/null || rc=$?
  event learner_stop "\"segment\":$segment,\"signal\":\"$sig\",\"rc\":$rc,\"seconds\":$(awk -v a="$(now)" -v b="$t0" 'BEGIN{printf "%.1f", a-b}')"
  if [[ $sig == TERM ]]; then
    if [[ $rc -eq 0 && -s $run/summary.json ]]; then
      cp "$run/summary.json" "$out/summary-$segment.json"
    else
      event bad_end "\"segment\":$segment,\"rc\":$rc"
      learner_ok=0
    fi
  fi
  cont_due all # stopped actors of the dead learner must run to notice it is gone
  reap_orphans "${children[@]+"${children[@]}"}"
}

cleanup() {
  touch "$out/stop"
  cont_due all 2>/dev/null || true
  [[ $learner -gt 0 ]] && kill -s KILL "$learner" 2>/dev/null || true
  local p
  for p in $(remote_actors); do kill -s KILL "$p" 2>/dev/null || true; done
  for p in $(jobs -p); do kill "$p" 2>/dev/null || true; done
  netns_down
}
trap 'cleanup; exit 130' INT TERM HUP
trap cleanup EXIT

# --- the soak -------------------------------------------------------------------------------
say "output in $out; $minutes min, $local_n local + $remote_n remote actors, a fault every ~${actor_every}s, a learner restart every ${learner_every}s"
event soak_start "\"minutes\":$minutes,\"local\":$local_n,\"remote\":$remote_n,\"actor_every\":$actor_every,\"learner_every\":$learner_every"
rm -f "$out/stop"
start_learner
for ((i = 0; i < remote_n; i++)); do remote_loop "$i" & done

t_end=$(($(date +%s) + minutes * 60))
next_sample=0
next_fault=$(($(date +%s) + actor_every / 2 + RANDOM % (actor_every + 1)))
next_learner=$(($(date +%s) + learner_every))
kills=0
while [[ $(date +%s) -lt $t_end ]]; do
  t=$(date +%s)
  if ! alive "$learner"; then
    rc=0; wait "$learner" 2>/dev/null || rc=$?
    event learner_died "\"segment\":$segment,\"rc\":$rc"
    say "the learner exited by itself (rc $rc): see $out/learner-$segment.log"
    tail -20 "$out/learner-$segment.log" >&2 || true
    learner_ok=0
    break
  fi
  if [[ $t -ge $next_sample ]]; then sample; next_sample=$((t + sample_every)); fi
  cont_due
  if [[ $t -ge $next_fault ]]; then
    fault
    next_fault=$((t + actor_every / 2 + RANDOM % (actor_every + 1)))
  fi
  if [[ $t -ge $next_learner ]]; then
    if ((kills % 2 == 0)); then sig=KILL; else sig=TERM; fi
    kills=$((kills + 1))
    say "learner segment $segment: SIG$sig, then --resume"
    stop_learner "$sig"
    segment=$((segment + 1))
    start_learner
    next_learner=$(($(date +%s) + learner_every))
  fi
  sleep 1
done

# No remote actor is started again from here on.
touch "$out/stop"
if [[ $learner_ok -eq 1 ]]; then
  sample
  say "the end: SIGTERM to the learner (segment $segment)"
  stop_learner TERM
fi
# The remote actors were told the run ended; their loops see the stop file.
deadline=$(($(date +%s) + 60))
while [[ -n $(remote_actors) && $(date +%s) -lt $deadline ]]; do sleep 0.5; done
remote_left=$(remote_actors | wc -l)
[[ $remote_left -gt 0 ]] && event remote_left "\"count\":$remote_left"
wait_loops=$(($(date +%s) + 10))
while [[ -n $(jobs -pr) && $(date +%s) -lt $wait_loops ]]; do sleep 0.5; done
leftover=0
for p in "${learner_pids[@]}"; do
  n=$(find /dev/shm -maxdepth 1 -name "recur-$p-*" 2>/dev/null | wc -l)
  leftover=$((leftover + n))
done
event soak_end "\"segments\":$((segment + 1)),\"shm_left\":$leftover,\"remote_left\":$remote_left,\"learner_ok\":$learner_ok"

# --- the report -----------------------------------------------------------------------------
python3 - "$out" <<'EOF'
import glob, json, os, sys
out = sys.argv[1]
load = lambda p: [json.loads(l) for l in open(p) if l.strip()]
events, samples = load(f"{out}/events.jsonl"), load(f"{out}/samples.jsonl")
ok = True
def line(check, passed, **kw):
    global ok
    ok &= bool(passed)
    print(json.dumps({"check": check, "ok": bool(passed), **kw}))

end = next(e for e in events if e["event"] == "soak_end")
faults = [e for e in events if e["event"] == "fault"]
logged = {"stalled_local_killed": 0, "silent_remote_dropped": 0, "remote_reconnects": 0}
for p in glob.glob(f"{out}/learner-*.log"):
    for l in open(p, errors="replace"):
        logged["stalled_local_killed"] += "stalled: no heartbeat" in l
        logged["silent_remote_dropped"] += "silent for" in l and "closed: actor" in l
        logged["remote_reconnects"] += "reconnected; continuing" in l
stops = [e for e in events if e["event"] == "learner_stop"]
gone = [e for e in events if e["event"] == "actors_gone"]
line("faults", True, sigkill=sum(f["signal"] == "KILL" for f in faults),
     sigstop=sum(f["signal"] == "STOP" for f in faults),
     remote=sum(f["kind"] == "remote" for f in faults),
     learner_sigkill=sum(s["signal"] == "KILL" for s in stops),
     learner_sigterm=sum(s["signal"] == "TERM" for s in stops),
     remote_actor_exits=sum(e["event"] == "remote_exit" for e in events),
     **logged)
line("learner", end["learner_ok"] == 1 and not any(e["event"] in ("learner_died", "bad_end") for e in events),
     segments=end["segments"], resumes=end["segments"] - 1)

rows, lost, dup, seqe, foreign, corrupt, rejected, incs, chunks = [], 0, 0, 0, 0, 0, 0, 0, 0
for p in sorted(glob.glob(f"{out}/summary-*.json"), key=lambda p: int(p.rsplit("-", 1)[1][:-5])):
    s = json.load(open(p)); t = s.get("transport", s)
    seg = int(p.rsplit("-", 1)[1][:-5])
    seg_lost = 0
    for i in t["incarnations"]:
        n = i["chunks"]
        if n > 0:
            seg_lost += abs(i["last_seq"] + 1 - n)
        dup += i["duplicates"]; seqe += i["seq_errors"]; foreign += i["foreign"]
        with open(f"{out}/incarnations.jsonl", "a") as f:
            f.write(json.dumps({"segment": seg, **i}) + "\n")
    lost += seg_lost
    corrupt += t["corrupted"]; rejected += t["rejected"]
    incs += len(t["incarnations"]); chunks += t["chunks"]
    rows.append((seg, len(t["incarnations"]), t["chunks"], seg_lost, t["restarts"],
                 s.get("updates"), s.get("dropped_chunks")))
line("lossless", lost == 0 and dup == 0 and seqe == 0 and foreign == 0 and rows,
     verified_segments=len(rows), incarnations=incs, chunks=chunks, lost=lost,
     duplicates=dup, seq_errors=seqe, foreign=foreign)
line("corrupt", corrupt == 0 and rejected == 0, corrupted_detected=corrupt, rejected=rejected,
     corrupt_accepted=0)
orphans = sum(g["orphans"] for g in gone)
line("orphans", orphans == 0 and end["remote_left"] == 0, local_orphans=orphans,
     remote_left=end["remote_left"],
     actors_exit_s_max=max((g["seconds"] for g in gone), default=None))
line("segments_left", end["shm_left"] == 0, shm_left=end["shm_left"])

def slope(pts):  # least squares, KiB per minute
    if len(pts) < 3: return None
    n = len(pts); mx = sum(x for x, _ in pts) / n; my = sum(y for _, y in pts) / n
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    return None if sxx == 0 else 60 * sum((x - mx) * (y - my) for x, y in pts) / sxx
per_seg = {}
for s in samples:
    per_seg.setdefault(s["segment"], []).append(s)
slopes = {}
for seg, ss in sorted(per_seg.items()):
    t0 = ss[0]["t"]
    slopes[seg] = slope([(s["t"], s["rss_kib"]) for s in ss if s["t"] - t0 >= 60])
    line("resources", True, segment=seg, samples=len(ss),
         rss_kib_first=ss[0]["rss_kib"], rss_kib_max=max(s["rss_kib"] for s in ss),
         rss_kib_last=ss[-1]["rss_kib"],
         rss_slope_kib_per_min=None if slopes[seg] is None else round(slopes[seg], 1),
         fds_min=min(s["fds"] for s in ss), fds_max=max(s["fds"] for s in ss),
         fds_last=ss[-1]["fds"], threads_max=max(s["threads"] for s in ss))
line("soak", ok)

print("\n| segment | incarnations | chunks | lost | restarts | updates | dropped (lag) | RSS first -> last KiB | RSS slope KiB/min | FDs min-max |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
byseg = {r[0]: r for r in rows}
for seg in sorted(set(per_seg) | set(byseg)):
    r = byseg.get(seg); ss = per_seg.get(seg, [])
    v = (f"{r[1]} | {r[2]} | {r[3]} | {r[4]} | {r[5]} | {r[6]}" if r
         else "unverified (SIGKILL) | | | | |")
    res = (f"{ss[0]['rss_kib']} -> {ss[-1]['rss_kib']} | "
           f"{'' if slopes.get(seg) is None else round(slopes[seg], 1)} | "
           f"{min(s['fds'] for s in ss)}-{max(s['fds'] for s in ss)}") if ss else "| |"
    print(f"| {seg} | {v} | {res} |")
print("\n| t (min) | RSS KiB | FDs | threads | local actors |")
print("| --- | --- | --- | --- | --- |")
step = max(1, len(samples) // 24)
for s in samples[::step]:
    print(f"| {s['t'] / 60:.1f} | {s['rss_kib']} | {s['fds']} | {s['threads']} | {s['local_actors']} |")
print(f"\nsoak {'PASSED' if ok else 'FAILED'}: {out}")
sys.exit(0 if ok else 1)
EOF
