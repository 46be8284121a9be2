#!/bin/sh
# Builds NiFi's Java Site-to-Site client from NiFi's source with javac, plus S2SDriver.java.
#
#   integration/java-s2s/build.sh NIFI_SRC NIFI_API_SRC [OUT]
#
# NIFI_SRC      a checkout of apache/nifi (checked with tag rel/nifi-2.11.0)
# NIFI_API_SRC  a checkout of apache/nifi-api (the 2.x API lives in its own repository; only four
#               interfaces of it are compiled: components.state.{Scope,StateManager,StateMap}, reporting.Severity)
# OUT           output directory (default /tmp/nifi-java/out); run with
#               java -cp "$OUT:$(cat $OUT/classpath)" S2SDriver ...
#
# Third-party jars come from Debian packages only (no Maven Central):
#   apt-get install openjdk-17-jdk-headless libjackson2-databind-java libjackson2-annotations-java \
#       libjackson2-core-java libslf4j-java libcommons-lang3-java
# Two annotation libraries NiFi's DTO classes carry are not in Debian (io.swagger.v3 @Schema and
# jakarta.xml.bind annotations/XmlAdapter); stand-ins/ holds minimal declarations of them so javac can
# compile the DTOs. They are build scaffolding: the client never reads those annotations at run time.
# javac -sourcepath compiles only the NiFi classes the driver reaches. Nothing built here is committed.
set -eu
NIFI_SRC=${1:?usage: build.sh NIFI_SRC NIFI_API_SRC [OUT]}
NIFI_API_SRC=${2:?usage: build.sh NIFI_SRC NIFI_API_SRC [OUT]}
OUT=${3:-/tmp/nifi-java/out}
HERE=$(cd "$(dirname "$0")" && pwd)
J=/usr/share/java
CP="$J/jackson-databind.jar:$J/jackson-core.jar:$J/jackson-annotations.jar:$J/slf4j-api.jar:$J/slf4j-simple.jar:$J/commons-lang3.jar"
for jar in $(echo "$CP" | tr ':' ' '); do
    [ -f "$jar" ] || { echo "missing $jar (install the Debian packages listed in $0)" >&2; exit 1; }
done
SP="$HERE/stand-ins"
for module in nifi-commons/nifi-site-to-site-client nifi-commons/nifi-utils nifi-commons/nifi-security-ssl \
        nifi-commons/nifi-security-cert nifi-commons/nifi-xml-processing \
        nifi-framework-bundle/nifi-framework/nifi-client-dto; do
    SP="$SP:$NIFI_SRC/$module/src/main/java"
done
SP="$SP:$NIFI_API_SRC/src/main/java"
mkdir -p "$OUT"
"${JAVA_HOME:+$JAVA_HOME/bin/}javac" -encoding UTF-8 -nowarn -proc:none -d "$OUT" -cp "$CP" -sourcepath "$SP" "$HERE/S2SDriver.java"
echo "$CP" > "$OUT/classpath"
echo "built: $(find "$OUT" -name '*.class' | wc -l) classes in $OUT"
echo "run:   java -cp \"$OUT:\$(cat $OUT/classpath)\" S2SDriver send|receive --url URL --port NAME ..."
