#!/usr/bin/env bash
# Run a command beside two CPU-bound processes, as on a machine others share:
#   scripts/busy.sh make test
# The two burners start first and are stopped when the command ends, however it
# ends; the command's exit status is this script's.
set -u
burners=()
stop() {
    for pid in "${burners[@]}"; do kill "$pid" 2>/dev/null; done
    wait "${burners[@]}" 2>/dev/null
}
trap stop EXIT
trap 'exit 130' INT TERM
for _ in 1 2; do
    sh -c 'while :; do :; done' &
    burners+=($!)
done
echo "busy: two CPU burners running (pids ${burners[*]})"
"$@"
