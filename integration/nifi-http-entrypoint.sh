#!/bin/bash
# Entrypoint for apache/nifi 2.x in docker-compose.yml: plain HTTP, anonymous, HTTP Site-to-Site.
#
# The image's own start script always configures HTTPS with single-user login (2.x removed its
# NIFI_WEB_HTTP_PORT switch). NiFi itself still supports plain HTTP: with no HTTPS port it uses
# an allow-all authorizer. This script edits conf/nifi.properties accordingly and starts NiFi.
set -euo pipefail

props="${NIFI_HOME:?}/conf/nifi.properties"
http_port="${S2S_HTTP_PORT:-8080}"
advertised_host="${S2S_ADVERTISED_HOST:-localhost}"
published_port="${S2S_PUBLISHED_PORT:-$http_port}"

set_prop() {
  # replace the value of an existing key, or append the key
  if grep -q "^$1=" "$props"; then
    sed -i -e "s|^$1=.*\$|$1=$2|" "$props"
  else
    printf '%s=%s\n' "$1" "$2" >> "$props"
  fi
}

set_prop nifi.web.http.host ''                       # all interfaces of the container
set_prop nifi.web.http.port "$http_port"
# NiFi advertises the forwarding port, when set, instead of nifi.web.http.port in its Site-to-Site
# peer list (NiFiProperties.getRemoteInputHttpPort): the port the Docker host publishes
set_prop nifi.web.http.port.forwarding "$published_port"
set_prop nifi.web.https.host ''
set_prop nifi.web.https.port ''
set_prop nifi.security.keystore ''
set_prop nifi.security.keystoreType ''
set_prop nifi.security.keystorePasswd ''
set_prop nifi.security.keyPasswd ''
set_prop nifi.security.truststore ''
set_prop nifi.security.truststoreType ''
set_prop nifi.security.truststorePasswd ''
set_prop nifi.security.user.authorizer ''
set_prop nifi.security.user.login.identity.provider ''
set_prop nifi.remote.input.host "$advertised_host"
set_prop nifi.remote.input.secure false
set_prop nifi.remote.input.socket.port ''             # RAW socket Site-to-Site off
set_prop nifi.remote.input.http.enabled true
set_prop nifi.remote.input.http.transaction.ttl '30 sec'
if [ -n "${NIFI_SENSITIVE_PROPS_KEY:-}" ]; then
  set_prop nifi.sensitive.props.key "$NIFI_SENSITIVE_PROPS_KEY"
fi
if [ -n "${NIFI_JVM_HEAP_INIT:-}" ]; then
  sed -i -e "s|^java.arg.2=.*\$|java.arg.2=-Xms${NIFI_JVM_HEAP_INIT}|" "$NIFI_HOME/conf/bootstrap.conf"
fi
if [ -n "${NIFI_JVM_HEAP_MAX:-}" ]; then
  sed -i -e "s|^java.arg.3=.*\$|java.arg.3=-Xmx${NIFI_JVM_HEAP_MAX}|" "$NIFI_HOME/conf/bootstrap.conf"
fi

echo "s2s: NiFi configured for plain HTTP on port $http_port, advertising $advertised_host:$published_port"
"$NIFI_HOME/bin/nifi.sh" run &
nifi_pid=$!
mkdir -p "$NIFI_HOME/logs"
touch "$NIFI_HOME/logs/nifi-app.log"
tail -F --pid="$nifi_pid" "$NIFI_HOME/logs/nifi-app.log" &
trap '"$NIFI_HOME/bin/nifi.sh" stop; exit 0' TERM INT HUP
wait "$nifi_pid"
