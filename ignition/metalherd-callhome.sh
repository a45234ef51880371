#!/usr/bin/env bash
# Tell metalherd how this boot went:
#   callhome.sh installed|failed|booted|wiped [REASON]
# POST {base}/callhome/{event}?mac=..&token=.. (plus &reason=.. when given,
# URL-encoded by curl).
# `booted` first waits for kubelet.service to be active. Values come from the
# environment (install.env / callhome.env), never from this file.
set -u
event="$1"
reason="${2:-}"
case "$event" in
  installed|failed|booted|wiped) ;;
  *) echo "callhome: unknown event $event" >&2; exit 2 ;;
esac

if [ "$event" = booted ]; then
  tries=0
  until systemctl is-active --quiet kubelet.service; do
    tries=$(( tries + 1 ))
    [ "$tries" -le 180 ] || { echo "callhome: kubelet not running" >&2; exit 1; }
    sleep 5
  done
fi

url="$METALHERD_CALLHOME_URL/callhome/$event?mac=$METALHERD_MAC&token=$METALHERD_TOKEN"
args=(-fsS --max-time 15 -X POST)
if [ -n "$reason" ]; then
  args+=(-G --data-urlencode "reason=$reason")
fi
attempt=0
while [ "$attempt" -lt 30 ]; do
  attempt=$(( attempt + 1 ))
  if curl "${args[@]}" "$url" >/dev/null; then
    exit 0
  fi
  sleep 5
done
echo "callhome: could not reach metalherd" >&2
exit 1
