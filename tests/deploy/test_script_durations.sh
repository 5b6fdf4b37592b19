#!/usr/bin/env bash
# Durations the project's own scripts pass to gsched / gworker / gs-local-cluster carry a unit and
# are of a sensible size. A bare number is read as seconds: bench/gs-bench/kill-worker.sh once
# passed `--heartbeat-timeout 2000` meaning milliseconds, and gsched waited 2000 s (issue 12).
# Usage: test_script_durations.sh SRC_DIR
set -uo pipefail
src=$1
fails=0
opts='heartbeat-timeout|heartbeat-interval|task-timeout|client-idle-timeout|churn-window'
while IFS= read -r hit; do
  file=${hit%%:*}; rest=${hit#*:}; line=${rest%%:*}; text=${rest#*:}
  while read -r opt val; do
    [ -z "$opt" ] && continue
    case "$val" in
      \$*|\"\$*) continue ;;   # a variable: the caller's value
    esac
    if ! [[ "$val" =~ ^([0-9]+(\.[0-9]+)?)(ms|s|m)$ ]]; then
      echo "FAIL: $file:$line: $opt $val has no unit (ms, s or m); a bare number means seconds"
      fails=$((fails + 1)); continue
    fi
    num=${BASH_REMATCH[1]} unit=${BASH_REMATCH[3]}
    secs=$(awk -v n="$num" -v u="$unit" 'BEGIN { print (u == "ms") ? n / 1000 : (u == "m") ? n * 60 : n }')
    if awk -v s="$secs" 'BEGIN { exit !(s > 600) }'; then
      echo "FAIL: $file:$line: $opt $val is $secs s (over 10 minutes in a script: a unit mix-up?)"
      fails=$((fails + 1))
    fi
  done < <(grep -oE -- "--($opts)[ =]+[^] \`),;]+" <<<"$text" | sed -E 's/^--([a-z-]+)[ =]+/\1 /')
done < <(cd "$src" && grep -rnE -- "--($opts)[ =]" --include='*.sh' bench deploy scripts .ci examples 2>/dev/null)
checked=$(cd "$src" && grep -rlE -- "--($opts)[ =]" --include='*.sh' bench deploy scripts .ci examples 2>/dev/null | wc -l)
echo "script durations: $checked script(s) checked, $fails problem(s)"
[ "$fails" -eq 0 ]
