#!/bin/bash
# Runs NiFi's own Java Site-to-Site client (built by build.sh) against `s2s serve`, over RAW
# (and over HTTP as a control), and prints one line per scenario: PASS/FAIL, counts, bytes, digests.
#
#   integration/java-s2s/scenarios.sh [OUT]        (OUT: build.sh's output, default /tmp/nifi-java/out)
#
# Environment: JAVA (a Java 21+ `java`, default `java`), S2S (the `s2s` command, default .venv/bin/s2s),
# WORK (scratch directory, default a new one under /tmp), TLS=1 to add the TLS scenario.
# Everything listens on 127.0.0.1 with free ports; every server it starts is stopped at exit.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
OUT=${1:-/tmp/nifi-java/out}
JAVA=${JAVA:-java}
S2S=${S2S:-$REPO/.venv/bin/s2s}
WORK=${WORK:-$(mktemp -d /tmp/java-s2s.XXXXXX)}
mkdir -p "$WORK"
CP="$OUT:$(cat "$OUT/classpath")"
SERVERS=()
FAILED=0
trap 'for p in "${SERVERS[@]}"; do kill "$p" 2>/dev/null; done' EXIT

drv() { "$JAVA" -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -cp "$CP" S2SDriver "$@"; }

# serve NAME ARGS...: start `s2s serve` with free ports (RAW too, unless NAME is no-raw); sets URL and ADMIN
serve() {
    local name=$1 raw=(--raw-port 0)
    shift
    [ "$name" = no-raw ] && raw=()
    "$S2S" serve --port 0 "${raw[@]}" "$@" >"$WORK/$name.log" 2>&1 &
    SERVERS+=($!)
    for _ in $(seq 100); do
        URL=$(grep -o 'http[s]*://[^ ]*/nifi' "$WORK/$name.log" | head -1)
        [ -n "$URL" ] && break
        sleep 0.1
    done
    ADMIN=${URL%/nifi}/s2s-admin
}

field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$2"; }

report() { # report NAME OK DETAIL
    if [ "$2" = 1 ]; then echo "PASS  $1: $3"; else echo "FAIL  $1: $3"; FAILED=1; fi
}

# roundtrip NAME TRANSPORT COUNT SIZE [driver options]: Java send into `in`, Java receive from `out`
roundtrip() {
    local name=$1 transport=$2 count=$3 size=$4
    shift 4
    local sent got
    sent=$(drv send --url "$URL" --port in --transport "$transport" --count "$count" --size "$size" \
        --manifest "$WORK/$name.sent" "$@" 2>&1 | tail -1)
    got=$(drv receive --url "$URL" --port out --transport "$transport" --expect "$count" \
        --manifest "$WORK/$name.got" "$@" 2>&1 | tail -1)
    local ok=0
    cmp -s "$WORK/$name.sent" "$WORK/$name.got" && [ "$(field count "$got")" = "$count" ] && ok=1
    report "$name" $ok "sent $(field count "$sent") FlowFiles $(field bytes "$sent") B, received \
$(field count "$got") $(field bytes "$got") B, digest $(field digest "$sent" | cut -c1-16) vs \
$(field digest "$got" | cut -c1-16); send ${sent##*peers=} receive ${got##*peers=}"
}

# digests of what `s2s receive` wrote (content files only), as "sha256 size" lines, sorted
dir_manifest() {
    find "$1" -type f ! -name '*.attributes.json' -exec sha256sum {} + | while read -r sum file; do
        echo "$sum $(stat -c %s "$file")"
    done | sort
}

echo "# java-s2s scenarios, $(date -u +%Y-%m-%dT%H:%MZ), work dir $WORK"

serve one --input-port in --output-port out --route in=out
roundtrip raw-plain RAW 100 10000
roundtrip raw-compressed RAW 100 10000 --compress
roundtrip raw-large RAW 2 $((8 * 1024 * 1024))
roundtrip raw-large-compressed RAW 2 $((8 * 1024 * 1024)) --compress
roundtrip raw-empty RAW 3 0
roundtrip raw-10000-small RAW 10000 100 --batch 1000
roundtrip http-plain HTTP 100 10000
roundtrip http-compressed HTTP 100 10000 --compress

# Java sends, our Python client receives over RAW
drv send --url "$URL" --port in --count 50 --size 5000 --manifest "$WORK/j2p.sent" >/dev/null 2>&1
"$S2S" receive --url "$URL" --port-name out --transport RAW --out "$WORK/j2p" >/dev/null 2>&1
cut -d' ' -f1,2 "$WORK/j2p.sent" | sort >"$WORK/j2p.sent2"
dir_manifest "$WORK/j2p" >"$WORK/j2p.got"
ok=0; cmp -s "$WORK/j2p.sent2" "$WORK/j2p.got" && ok=1
attrs_ok=$(python3 - "$WORK/j2p" <<'EOF'
import json, pathlib, sys
files = list(pathlib.Path(sys.argv[1]).glob("*.attributes.json"))
good = [f for f in files if json.loads(f.read_text()).get("java.note") == "ünïcödé attribute ✓"]
print(f"{len(good)}/{len(files)}")
EOF
)
[ "$attrs_ok" = "50/50" ] || ok=0
report java-to-python-raw $ok "$(wc -l <"$WORK/j2p.sent2") sent by Java, $(wc -l <"$WORK/j2p.got") written by s2s receive, \
digests equal=$([ $ok = 1 ] && echo yes || echo no), non-ASCII attribute intact on $attrs_ok"

# our Python client sends over RAW, Java receives
mkdir -p "$WORK/p2j"
for i in $(seq 1 40); do head -c $((i * 997)) /dev/urandom >"$WORK/p2j/f$i"; done
: >"$WORK/p2j/empty"
"$S2S" send --url "$URL" --port-name in --transport RAW --attr origin=python "$WORK"/p2j/* >/dev/null 2>&1
got=$(drv receive --url "$URL" --port out --expect 41 --require-attr origin=python --manifest "$WORK/p2j.got" 2>&1 | tail -1)
dir_manifest "$WORK/p2j" >"$WORK/p2j.sent"
cut -d' ' -f1,2 "$WORK/p2j.got" | sort >"$WORK/p2j.got2"
ok=0; cmp -s "$WORK/p2j.sent" "$WORK/p2j.got2" && ok=1
report python-to-java-raw $ok "41 files sent by s2s send, Java received $(field count "$got") ($(field bytes "$got") B)"

# compressed both ways between the two clients
drv send --url "$URL" --port in --count 20 --size 30000 --compress --manifest "$WORK/j2pc.sent" >/dev/null 2>&1
"$S2S" receive --url "$URL" --port-name out --transport RAW --compress --out "$WORK/j2pc" >/dev/null 2>&1
cut -d' ' -f1,2 "$WORK/j2pc.sent" | sort >"$WORK/j2pc.sent2"
dir_manifest "$WORK/j2pc" >"$WORK/j2pc.got"
ok=0; cmp -s "$WORK/j2pc.sent2" "$WORK/j2pc.got" && [ "$(wc -l <"$WORK/j2pc.got")" = 20 ] && ok=1
report java-to-python-raw-compressed $ok "$(wc -l <"$WORK/j2pc.got") of 20 FlowFiles"
"$S2S" send --url "$URL" --port-name in --transport RAW --compress --attr origin=python "$WORK"/p2j/* >/dev/null 2>&1
got=$(drv receive --url "$URL" --port out --expect 41 --require-attr origin=python --compress --manifest "$WORK/p2jc.got" 2>&1 | tail -1)
cut -d' ' -f1,2 "$WORK/p2jc.got" | sort >"$WORK/p2jc.got2"
ok=0; cmp -s "$WORK/p2j.sent" "$WORK/p2jc.got2" && ok=1
report python-to-java-raw-compressed $ok "41 files, Java received $(field count "$got")"

# errors: unknown port, stopped port, a cancelled receive leaves its FlowFiles queued
out=$(drv send --url "$URL" --port no-such-port --count 1 2>&1 | grep -m1 ERROR)
ok=0; grep -q "no-such-port" <<<"$out" && ok=1
report raw-unknown-port-name $ok "$out"
out=$(drv send --url "$URL" --port-id 00000000-0000-0000-0000-00000000dead --count 1 2>&1 | grep -A3 -m1 ERROR | tr '\n' ' ')
ok=0; grep -q "UnknownPortException" <<<"$out" && ok=1
report raw-unknown-port-id $ok "$out"
curl -s -X POST -d '{}' "$ADMIN/ports/in/stop" >/dev/null
out=$(drv send --url "$URL" --port in --count 1 2>&1 | grep -A3 -m1 ERROR | tr '\n' ' ')
curl -s -X POST -d '{}' "$ADMIN/ports/in/start" >/dev/null
ok=0; grep -qi "PortNotRunning\|not running\|PORT_NOT_IN_VALID_STATE" <<<"$out" && ok=1
report raw-stopped-port $ok "$out"
drv send --url "$URL" --port in --count 30 --size 100 >/dev/null 2>&1
cancelled=$(drv receive --url "$URL" --port out --cancel 2>&1 | tail -1)
after=$(drv receive --url "$URL" --port out --expect 30 2>&1 | tail -1)
ok=0; [ "$(field count "$after")" = 30 ] && ok=1
report raw-cancelled-receive $ok "cancelled after reading $(field count "$cancelled"), then received $(field count "$after") of 30"

drv send --url "$URL" --port in --count 10 --cancel >/dev/null 2>&1
queued=$(curl -s "$ADMIN/status" | python3 -c 'import json,sys; print(json.load(sys.stdin)["nodes"][0]["queued"])')
last=$(curl -s "$ADMIN/transactions" | python3 -c 'import json,sys; t=json.load(sys.stdin)["transactions"][-1]; print(t["direction"], t["outcome"], t["responseCode"])')
ok=0; [ "$queued" = 0 ] && [ "$last" = "send canceled 15" ] && ok=1
report raw-cancelled-send $ok "10 sent then tx.cancel(): $queued queued; the server's record: $last (15 = CANCEL_TRANSACTION)"

# batch hint: requestBatchCount(7) caps each receive transaction
drv send --url "$URL" --port in --count 50 >/dev/null 2>&1
got=$(drv receive --url "$URL" --port out --expect 50 --request-batch-count 7 2>&1 | tail -1)
ok=0; [ "$(field count "$got")" = 50 ] && [ "$(field maxPerTx "$got")" = 7 ] && ok=1
report raw-batch-count-hint $ok "requestBatchCount(7): received $(field count "$got"), at most $(field maxPerTx "$got") per transaction"

# one client, transactions 20 s apart: the pooled connection is used again (server keeps it 60 s)
sent=$(drv send --url "$URL" --port in --count 5 --repeat 2 --pause-s 20 2>&1 | tail -1)
got=$(drv receive --url "$URL" --port out --expect 10 --repeat 1 2>&1 | tail -1)
ok=0; [ "$(field count "$got")" = 10 ] && [ "$(field digest "$got")" = "$(field digest "$sent")" ] && ok=1
report raw-pooled-connection-reuse $ok "2 transactions 20 s apart on one client: sent $(field count "$sent"), received $(field count "$got")"

# back-pressure: a queue capacity of 5; the first transaction (8) is answered 0E; the Java client
# holds its pooled connection back for its 3 s penalty and then sends on it with no new handshake:
# that request waits until a receive makes room (NiFi does not trigger a back-pressured port)
serve capacity --capacity 5 --input-port in --output-port out --route in=out
drv send --url "$URL" --port in --count 10 --batch 8 --manifest "$WORK/cap.sent" >"$WORK/cap.send" 2>&1 &
sender=$!
sleep 6
got=$(drv receive --url "$URL" --port out --expect 10 --manifest "$WORK/cap.got" 2>&1 | tail -1)
wait $sender
sent=$(tail -1 "$WORK/cap.send")
codes=$(curl -s "$ADMIN/transactions" | python3 -c 'import json,sys; print(" ".join("%s:%d:%d" % (t["direction"], t["flowFiles"], t["responseCode"]) for t in json.load(sys.stdin)["transactions"] if t["flowFiles"]))')
ok=0; cmp -s "$WORK/cap.sent" "$WORK/cap.got" && [ "$(field count "$got")" = 10 ] && grep -q "^send:8:14 " <<<"$codes" && ok=1
report raw-back-pressure $ok "capacity 5: sent $(field count "$sent"), received $(field count "$got"); transactions (direction:FlowFiles:code) $codes"
# the same without a receive: the held request outlives the client's 5 s timeout; nothing of it is queued
curl -s -X POST -d '{}' "$ADMIN/reset" >/dev/null
out=$(drv send --url "$URL" --port in --count 10 --batch 8 --timeout-s 5 2>&1 | grep -m1 ERROR)
queued=$(curl -s "$ADMIN/status" | python3 -c 'import json,sys; print(json.load(sys.stdin)["nodes"][0]["queued"])')
ok=0; grep -q "Read timed out" <<<"$out" && [ "$queued" = 8 ] && ok=1
report raw-back-pressure-expired $ok "no receive: $queued queued (the first 8); the second transaction: ${out#ERROR }"

# a 2-node cluster: the Java client lists both peers and spreads its transactions over them
serve two --nodes 2 --input-port in --output-port out --route in=out
sent=$(drv send --url "$URL" --port in --count 2000 --size 1000 --batch 20 --manifest "$WORK/two.sent" 2>&1 | tail -1)
got=$(drv receive --url "$URL" --port out --expect 2000 --manifest "$WORK/two.got" 2>&1 | tail -1)
ok=0
cmp -s "$WORK/two.sent" "$WORK/two.got" && [ "$(grep -o 'nifi://' <<<"${sent##*peers=}" | wc -l)" = 2 ] \
    && [ "$(grep -o 'nifi://' <<<"${got##*peers=}" | wc -l)" = 2 ] && ok=1
report raw-two-nodes $ok "sent $(field count "$sent") via ${sent##*peers=}; received $(field count "$got") via ${got##*peers=}"

# node 1 of 2 stopped (admin API) before the client starts: the peer list leaves it out
curl -s -X POST -d '{}' "$ADMIN/nodes/1/stop" >/dev/null
sent=$(drv send --url "$URL" --port in --count 200 --batch 20 2>&1 | tail -1)
ok=0; [ "$(field count "$sent")" = 200 ] && [ "$(grep -o 'nifi://' <<<"${sent##*peers=}" | wc -l)" = 1 ] && ok=1
report raw-stopped-node $ok "node 1 stopped: sent $(field count "$sent") via ${sent##*peers=}"

# a server without a RAW port: NiFi's client finds no RAW peer
serve no-raw --input-port in --output-port out
out=$(drv send --url "$URL" --port in --count 1 2>&1 | grep -m1 "not configured to allow RAW")
ok=0; [ -n "$out" ] && ok=1
report raw-no-raw-port $ok "${out##*due to: }"

if [ "${TLS:-0}" = 1 ]; then
    serve tls --tls "$WORK/tls" --input-port in --output-port out --route in=out
    pass=$(cat "$WORK/tls/client.p12.password")
    # the Java client wants a truststore file: the generated CA as PKCS12, same password as client.p12
    rm -f "$WORK/tls/truststore.p12"
    "$(dirname "$(command -v "$JAVA")")/keytool" -importcert -noprompt -alias s2s-ca -file "$WORK/tls/ca.pem" \
        -storetype PKCS12 -keystore "$WORK/tls/truststore.p12" -storepass "$pass" >/dev/null 2>&1
    TLSARGS=(--truststore "$WORK/tls/truststore.p12" --keystore "$WORK/tls/client.p12" --storepass "$pass")
    roundtrip raw-tls RAW 100 10000 "${TLSARGS[@]}"
    roundtrip raw-tls-compressed RAW 100 10000 --compress "${TLSARGS[@]}"
    roundtrip https-control HTTP 100 10000 "${TLSARGS[@]}"
    # a certificate allowed on `out` only: site info works, the RAW handshake for `in` is refused
    serve tls-allow --tls "$WORK/tls" --allow "out=CN=s2s-denied, OU=pyspark-s2s" --input-port in --output-port out
    dpass=$(cat "$WORK/tls/denied.p12.password")
    rm -f "$WORK/tls/truststore-denied.p12"
    "$(dirname "$(command -v "$JAVA")")/keytool" -importcert -noprompt -alias s2s-ca -file "$WORK/tls/ca.pem" \
        -storetype PKCS12 -keystore "$WORK/tls/truststore-denied.p12" -storepass "$dpass" >/dev/null 2>&1
    in_id=$(curl -s --cacert "$WORK/tls/ca.pem" --cert "$WORK/tls/client.pem" --key "$WORK/tls/client.key" \
        "$ADMIN/status" | python3 -c 'import json,sys; print([p["id"] for p in json.load(sys.stdin)["nodes"][0]["ports"] if p["name"]=="in"][0])')
    out=$(drv send --url "$URL" --port-id "$in_id" --count 1 --truststore "$WORK/tls/truststore-denied.p12" \
        --keystore "$WORK/tls/denied.p12" --storepass "$dpass" 2>&1 | grep -m1 ERROR)
    ok=0; grep -q "User Not Authorized" <<<"$out" && ok=1
    report raw-tls-unauthorized $ok "$out"
    # NiFi's client does no host-name check on RAW TLS sockets: a server certificate for DNS:localhost
    # only; the site info goes to https://localhost (matches), the peer list then names 127.0.0.1
    mkdir -p "$WORK/tls-host" && cp "$WORK"/tls/* "$WORK/tls-host/"
    "$REPO/.venv/bin/python" "$HERE/localhost_only_cert.py" "$WORK/tls-host"
    serve tls-host --tls "$WORK/tls-host" --input-port in --output-port out --route in=out
    local_url="https://localhost:${URL##*:}"
    sent=$(drv send --url "$local_url" --port in --count 10 "${TLSARGS[@]}" 2>&1 | tail -1)
    ok=0; grep -q "peers={nifi://127.0.0.1:" <<<"$sent" && [ "$(field count "$sent")" = 10 ] && ok=1
    report raw-tls-no-hostname-check $ok "certificate for DNS:localhost only, RAW transactions to 127.0.0.1: $sent"
fi

[ $FAILED = 0 ] && echo "all scenarios passed" || echo "some scenarios FAILED"
exit $FAILED
