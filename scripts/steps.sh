#!/usr/bin/env bash
# Run each of `make test`'s steps, every one even when an earlier one failed, then
# say which ran, how long each took and which failed; exit non-zero if any failed.
#   scripts/steps.sh MAKE STEP...   (each STEP is a Makefile target)
set -u
make=$1; shift
passed=() failed=()
started=$SECONDS
for step in "$@"; do
    echo "== $step"
    begin=$SECONDS
    if "$make" --no-print-directory "$step"; then
        passed+=("$step ($(( (SECONDS - begin) / 60 ))m$(( (SECONDS - begin) % 60 ))s)")
    else
        failed+=("$step ($(( (SECONDS - begin) / 60 ))m$(( (SECONDS - begin) % 60 ))s)")
    fi
done
echo "== steps run in $(( (SECONDS - started) / 60 ))m$(( (SECONDS - started) % 60 ))s"
for step in "${passed[@]}"; do echo "   passed: $step"; done
for step in "${failed[@]}"; do echo "   FAILED: $step"; done
[ ${#failed[@]} -eq 0 ]
