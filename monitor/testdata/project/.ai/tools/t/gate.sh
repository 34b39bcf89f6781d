#!/bin/sh
# t/gate: waits (at most 50 s) until the file named by the call's input
# {"file": PATH} exists. Tests hold threads running with it.
file=$(cat | sed -n 's/.*"file": *"\([^"]*\)".*/\1/p')
i=0
while [ ! -e "$file" ] && [ "$i" -lt 500 ]; do sleep 0.1; i=$((i + 1)); done
if [ -e "$file" ]; then echo '{"output": "released"}'; else echo '{"output": "gate timed out", "is_error": true}'; fi
