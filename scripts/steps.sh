#!/usr/bin/env bash
# Run each of `make test`'s steps, every one even when an earlier one failed, then
# say which ran, how long each took and which failed; exit non-zero if any failed.
#   scripts/steps.sh MAKE STEP...   (each STEP is a Makefile target)
# A STEP written `a+b+c` runs those targets at the same time (steps that mostly wait
# on processes, servers and sleeps, not on the CPU): each line of their output
# starts with the target's name, and each is timed and judged on its own.
set -u
make=$1; shift
passed=() failed=()
started=$SECONDS
results=$(mktemp -d)
trap 'rm -rf "$results"' EXIT

took() {  # seconds -> "XmYs"
    echo "$(($1 / 60))m$(($1 % 60))s"
}

# One target: its output (prefixed when it runs beside others) and, in
# $results/<target>, "passed|failed <seconds>".
run_one() {
    local step=$1 prefix=$2 begin=$SECONDS status=passed
    if [ -n "$prefix" ]; then
        "$make" --no-print-directory "$step" 2>&1 | sed -u "s/^/[$step] /"
        [ "${PIPESTATUS[0]}" -eq 0 ] || status=failed
    else
        "$make" --no-print-directory "$step" || status=failed
    fi
    echo "$status $((SECONDS - begin))" >"$results/$step"
}

for group in "$@"; do
    IFS=+ read -r -a steps <<<"$group"
    echo "== ${steps[*]}"
    if [ ${#steps[@]} -eq 1 ]; then
        run_one "${steps[0]}" ""
    else
        for step in "${steps[@]}"; do run_one "$step" yes & done
        wait
    fi
    for step in "${steps[@]}"; do
        read -r status seconds <"$results/$step"
        if [ "$status" = passed ]; then
            passed+=("$step ($(took "$seconds"))")
        else
            failed+=("$step ($(took "$seconds"))")
        fi
    done
done
echo "== steps run in $(took $((SECONDS - started)))"
for step in "${passed[@]}"; do echo "   passed: $step"; done
for step in "${failed[@]}"; do echo "   FAILED: $step"; done
[ ${#failed[@]} -eq 0 ]
