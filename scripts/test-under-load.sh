#!/usr/bin/env bash
# Run CI's job (.ci/run) on fresh clones of this checkout's HEAD while a CPU burner keeps every core busy: the
# conditions of a shared, busy 2-core machine, where a test that waits for a time instead of the thing it needs
# fails. Each round clones the commit that was HEAD when the run began into its own folder (the committed tree only,
# as CI sees it), so commit first; commits made while it runs do not change what the later rounds test.
#
# bash scripts/test-under-load.sh [ROUNDS] [BURNERS]   ROUNDS clean clones one after another (default 3);
#                                                      BURNERS busy processes beside them (default: one per core)
# Each round's log is kept in test-artifacts/under-load/round-N.log; the summary line says how many passed and how
# long each took. Exits non-zero when any round failed.
set -uo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
burners=${2:-$(nproc 2>/dev/null || echo 2)}
here=$PWD
logs="$here/test-artifacts/under-load"
mkdir -p "$logs"
work=$(mktemp -d "${TMPDIR:-/tmp}/gpu-magics-under-load.XXXXXX")
burner_pids=()
stop_burners() {
  for pid in "${burner_pids[@]}"; do kill "$pid" 2>/dev/null; done
  wait "${burner_pids[@]}" 2>/dev/null
  burner_pids=()
}
trap 'stop_burners; rm -rf "$work"' EXIT

for _ in $(seq "$burners"); do
  # a busy loop at normal priority, as another user's job would be (not niced: that would hide the load)
  python3 -c 'while True: pass' &
  burner_pids+=("$!")
done
commit=$(git rev-parse HEAD)
echo "under load: $burners busy processes on $(nproc) cores; $rounds rounds of .ci/run on clean clones of ${commit:0:7}"

passed=0
summary=()
for round in $(seq "$rounds"); do
  clone="$work/round-$round/gpu-magics"
  git clone -q "$here" "$clone"
  git -C "$clone" checkout -q "$commit"
  # ../shared sits beside a CI clone; bring it where this checkout has one
  [ -d "$here/../shared" ] && ln -s "$(cd "$here/../shared" && pwd)" "$work/round-$round/shared"
  start=$(date +%s)
  (cd "$clone" && bash .ci/run) \
    >"$logs/round-$round.log" 2>&1
  rc=$?
  took=$(($(date +%s) - start))
  if [ "$rc" = 0 ]; then
    passed=$((passed + 1))
    summary+=("round $round: passed in $((took / 60)) min $((took % 60)) s")
  else
    summary+=("round $round: FAILED in $((took / 60)) min $((took % 60)) s ($(grep -E '^(FAILED|ERROR) ' "$logs/round-$round.log" | head -3 | tr '\n' ' '))")
  fi
  echo "${summary[-1]}"
  rm -rf "$work/round-$round"
done
echo "under load: $passed of $rounds rounds passed (logs in $logs)"
[ "$passed" = "$rounds" ]
