printf '%s:start\n' "$2"; printf '%s:start\n' "$2" >&2
exec 3<&0 </dev/null
if command -v setsid >/dev/null 2>&1; then setsid sh -c "$1" & else sh -c "$1" & fi
pid=$!
( while read -r _ <&3; do :; done
  kill -TERM -"$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null
  sleep 2
  kill -KILL -"$pid" 2>/dev/null ) >/dev/null 2>&1 &
watcher=$!
exec 3<&-
wait "$pid"
rc=$?
kill "$watcher" 2>/dev/null
printf '%s:end\n' "$2"; printf '%s:end %s\n' "$2" "$rc" >&2
