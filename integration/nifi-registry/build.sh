#!/bin/bash
# Builds Apache NiFi 2.11's own Confluent Schema Registry client (RestSchemaRegistryClient, on NiFi's web client,
# java.net.http underneath), the ConfluentEncodedSchemaReferenceReader/Writer and the Avro reader/writer classes
# they feed, from NiFi's source with javac, plus the driver NiFiRegistry.java. No Maven, no network.
#
#   integration/nifi-registry/build.sh [OUT]
#
# Environment (as integration/nifi-records/build.sh): NIFI_GIT (default /work/.mirror/apache+nifi/repo), NIFI_TAG
# (default rel/nifi-2.11.0), JAVA_HOME (a JDK 21+, default /usr/lib/jvm/temurin-25-jdk-amd64), PYSPARK_JARS.
# OUT (default /tmp/nifi-registry) gets src/ (NiFi's sources at the tag), classes/, classpath.
# Jars: pyspark's avro 1.12.1, jackson 2.21, commons-lang3, commons-io, commons-text, slf4j-api.
# Stand-ins: integration/nifi-records/stubs (ComponentLog to stderr, ...) and stubs/ here (ControllerService,
# AbstractControllerService with getLogger() only, the @Tags/@CapabilityDescription annotations): nifi-api 2.x is
# its own repository. ConfluentSchemaRegistry itself (the controller service: properties, @OnEnabled) is not
# compiled; the driver does what its retrieveSchema does with the RestSchemaRegistryClient it would build.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${1:-/tmp/nifi-registry}
NIFI_GIT=${NIFI_GIT:-/work/.mirror/apache+nifi/repo}
NIFI_TAG=${NIFI_TAG:-rel/nifi-2.11.0}
JAVA_HOME=${JAVA_HOME:-/usr/lib/jvm/temurin-25-jdk-amd64}
if [ -z "${PYSPARK_JARS:-}" ]; then
    for py in "$HERE/../../.venv/bin/python" python3; do
        PYSPARK_JARS=$("$py" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))' 2>/dev/null) && break
    done
fi
start=$(date +%s)
MODULES="nifi-commons/nifi-record
nifi-commons/nifi-utils
nifi-commons/nifi-web-client-api
nifi-commons/nifi-web-client
nifi-extension-bundles/nifi-extension-utils/nifi-record-utils/nifi-avro-record-utils
nifi-extension-bundles/nifi-extension-utils/nifi-record-utils/nifi-standard-record-utils
nifi-extension-bundles/nifi-standard-services/nifi-record-serialization-services-bundle/nifi-record-serialization-services
nifi-extension-bundles/nifi-standard-services/nifi-schema-registry-service-api
nifi-extension-bundles/nifi-standard-services/nifi-ssl-context-service-api
nifi-extension-bundles/nifi-confluent-platform-bundle/nifi-confluent-schema-registry-service"
mkdir -p "$OUT"
if [ "$(cat "$OUT/src.tag" 2>/dev/null)" != "$NIFI_TAG" ]; then
    rm -rf "$OUT/src" "$OUT/src.tag"
    mkdir -p "$OUT/src"
    paths=""
    for m in $MODULES; do paths="$paths $m/src/main/java"; done
    # shellcheck disable=SC2086
    git --git-dir="$NIFI_GIT" archive --format=tar "$NIFI_TAG" $paths > "$OUT/src.tar" 2> "$OUT/git.err" \
        || { cat "$OUT/git.err" >&2; exit 1; }
    tar -x -C "$OUT/src" -f "$OUT/src.tar"
    rm -f "$OUT/src.tar"
    echo "$NIFI_TAG" > "$OUT/src.tag"
fi
echo "NiFi sources: $NIFI_GIT at $NIFI_TAG ($(git --git-dir="$NIFI_GIT" rev-parse "$NIFI_TAG^{commit}")) -> $OUT/src"
CP=""
for pattern in 'avro-1.*.jar' 'jackson-core-2.*.jar' 'jackson-databind-2.*.jar' 'jackson-annotations-2.*.jar' \
        'commons-io-2.*.jar' 'commons-lang3-3.*.jar' 'commons-text-1.*.jar' 'slf4j-api-2.*.jar'; do
    found=$(ls "$PYSPARK_JARS"/$pattern 2>/dev/null | head -n 1)
    [ -n "$found" ] || { echo "missing $PYSPARK_JARS/$pattern" >&2; exit 1; }
    CP="$CP:$found"
done
CP="${CP#:}"
SP="$HERE/stubs:$HERE/../nifi-records/stubs"
for m in $MODULES; do SP="$SP:$OUT/src/$m/src/main/java"; done
rm -rf "$OUT/classes"
mkdir -p "$OUT/classes"
"$JAVA_HOME/bin/javac" -encoding UTF-8 -nowarn -proc:none -Xlint:none -d "$OUT/classes" -cp "$CP" -sourcepath "$SP" \
    "$HERE/NiFiRegistry.java"
echo "$CP" > "$OUT/classpath"
( cd "$OUT/classes" && find org -name '*.class' ! -name '*$*' | sed 's/\.class$//; s|/|.|g' | sort ) > "$OUT/compiled-classes.txt"
echo "compiled: $(find "$OUT/classes" -name '*.class' | wc -l) class files ($(wc -l < "$OUT/compiled-classes.txt") top-level classes) in $(( $(date +%s) - start )) s"
echo "run:      $JAVA_HOME/bin/java -Duser.timezone=UTC -cp \"$OUT/classes:\$(cat $OUT/classpath)\" NiFiRegistry id|name|definition|read|write ..."
