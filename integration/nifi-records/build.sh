#!/bin/bash
# Builds Apache NiFi's record readers and writers (Avro, JSON, CSV) from NiFi's source with javac, plus the
# driver NiFiRecords.java. Idempotent: sources are extracted once per tag, classes are rebuilt each run (~1 min).
#
#   integration/nifi-records/build.sh [OUT]
#
# Environment:
#   NIFI_GIT   a git directory holding apache/nifi (default /work/.mirror/apache+nifi/repo; a checkout's .git works)
#   NIFI_TAG   default rel/nifi-2.11.0
#   JAVA_HOME  a JDK 21+ (default /usr/lib/jvm/temurin-25-jdk-amd64)
#   PYSPARK_JARS  pyspark's jars/ folder (default: the one of /work/main/.venv, else of `python3 -c 'import pyspark'`)
# OUT (default /tmp/nifi-records) gets src/ (NiFi's sources at the tag), csv19/ (see below), classes/, classpath.
# Run:  java -Duser.timezone=UTC -cp "$OUT/classes:$(cat $OUT/classpath)" NiFiRecords read|write|schema ...
#
# Third-party jars (no Maven Central here):
#   pyspark's jars/: avro 1.12.1 (NiFi 2.11 uses 1.12.1), jackson-core/databind/annotations 2.21 (NiFi: 2.22.1),
#     commons-io, commons-lang3, commons-text, slf4j-api
#   Debian: apt-get install libcommons-csv-java   -> Commons CSV 1.9.0 (NiFi 2.11 uses 1.14.1)
# nifi-api 2.x is its own repository (apache/nifi-api), not in the NiFi tree: stubs/ declares the few nifi-api
# types the compiled classes name (ComponentLog printing to stderr, PropertyDescriptor keeping name and default,
# PropertyContext/PropertyValue, AllowableValue, validators that accept anything, ...).
#
# Commons CSV 1.9.0 lacks four 1.10+/1.13+ API calls that NiFi's CSV classes make. csv19/ holds copies of those
# four files (CSVUtils, CSVRecordReader, CSVRecordSource, WriteCSVResult) with the calls renamed to their 1.9
# equivalents, printed below as a diff; javac takes them before the originals:
#   CSVFormat.Builder.get()                          -> build()                        (same builder, 1.13 rename)
#   CSVParser.builder().setReader(r).setFormat(f).get() -> new CSVParser(r, f)          (1.13 builder)
#   setDuplicateHeaderMode(allow ? ALLOW_ALL : DISALLOW) -> setAllowDuplicateHeaderNames(allow)  (1.10 enum)
# The parsing and printing are Commons CSV 1.9.0's, not 1.14.1's: see RESULTS.md for what that may change.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${1:-/tmp/nifi-records}
NIFI_GIT=${NIFI_GIT:-/work/.mirror/apache+nifi/repo}
NIFI_TAG=${NIFI_TAG:-rel/nifi-2.11.0}
JAVA_HOME=${JAVA_HOME:-/usr/lib/jvm/temurin-25-jdk-amd64}
if [ -z "${PYSPARK_JARS:-}" ]; then
    for py in "$HERE/../../.venv/bin/python" python3; do
        PYSPARK_JARS=$("$py" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))' 2>/dev/null) && break
    done
fi
start=$(date +%s)

# the modules whose classes the driver reaches (javac compiles only those it needs)
MODULES="nifi-commons/nifi-record
nifi-commons/nifi-utils
nifi-extension-bundles/nifi-extension-utils/nifi-record-utils/nifi-avro-record-utils
nifi-extension-bundles/nifi-extension-utils/nifi-record-utils/nifi-standard-record-utils
nifi-extension-bundles/nifi-extension-utils/nifi-record-utils/nifi-json-record-utils
nifi-extension-bundles/nifi-extension-utils/nifi-record-utils/nifi-schema-inference-utils
nifi-extension-bundles/nifi-standard-services/nifi-record-serialization-services-bundle/nifi-record-serialization-services
nifi-extension-bundles/nifi-standard-services/nifi-record-serialization-services-bundle/nifi-record-serialization-services-shared"

# 1. NiFi's sources at the tag (src/main/java of each module), once per tag
mkdir -p "$OUT"
if [ "$(cat "$OUT/src.tag" 2>/dev/null)" != "$NIFI_TAG" ]; then
    rm -rf "$OUT/src" "$OUT/src.tag"
    mkdir -p "$OUT/src"
    paths=""
    for m in $MODULES; do paths="$paths $m/src/main/java"; done
    # shellcheck disable=SC2086
    # (a partial mirror may print "invalid object" for files outside these paths: shown only if git fails)
    git --git-dir="$NIFI_GIT" archive --format=tar "$NIFI_TAG" $paths > "$OUT/src.tar" 2> "$OUT/git.err" \
        || { cat "$OUT/git.err" >&2; exit 1; }
    tar -x -C "$OUT/src" -f "$OUT/src.tar"
    rm -f "$OUT/src.tar"
    echo "$NIFI_TAG" > "$OUT/src.tag"
fi
echo "NiFi sources: $NIFI_GIT at $NIFI_TAG ($(git --git-dir="$NIFI_GIT" rev-parse "$NIFI_TAG^{commit}")) -> $OUT/src"

# 2. jars
jar() {  # the one jar matching a pattern in a folder
    local found
    found=$(ls "$1"/$2 2>/dev/null | head -n 1)
    [ -n "$found" ] || { echo "missing $1/$2" >&2; exit 1; }
    echo "$found"
}
CP=""
for pattern in 'avro-1.*.jar' 'jackson-core-2.*.jar' 'jackson-databind-2.*.jar' 'jackson-annotations-2.*.jar' \
        'commons-io-2.*.jar' 'commons-lang3-3.*.jar' 'commons-text-1.*.jar' 'slf4j-api-2.*.jar'; do
    CP="$CP:$(jar "$PYSPARK_JARS" "$pattern")"
done
[ -f /usr/share/java/commons-csv.jar ] || { echo "missing /usr/share/java/commons-csv.jar: apt-get install libcommons-csv-java" >&2; exit 1; }
CP="${CP#:}:/usr/share/java/commons-csv.jar"
echo "jars:"; echo "$CP" | tr ':' '\n' | sed 's/^/  /'

# 3. the Commons CSV 1.9 overlay (copies of four files, API calls renamed; see the header of this script)
rm -rf "$OUT/csv19"
SVC=nifi-extension-bundles/nifi-standard-services/nifi-record-serialization-services-bundle/nifi-record-serialization-services/src/main/java
STD=nifi-extension-bundles/nifi-extension-utils/nifi-record-utils/nifi-standard-record-utils/src/main/java
for f in "$STD/org/apache/nifi/csv/CSVUtils.java" "$SVC/org/apache/nifi/csv/CSVRecordReader.java" \
        "$SVC/org/apache/nifi/csv/CSVRecordSource.java" "$SVC/org/apache/nifi/csv/WriteCSVResult.java"; do
    rel=${f#*/src/main/java/}
    mkdir -p "$OUT/csv19/$(dirname "$rel")"
    perl -0pe '
        s/CSVParser\.builder\(\)\s*\.setReader\((\w+)\)\s*\.setFormat\(([^;]*?)\)\s*\.get\(\)/new CSVParser($1, $2)/g;
        s/import org\.apache\.commons\.csv\.DuplicateHeaderMode;\n//;
        s/final DuplicateHeaderMode mode = allow \? DuplicateHeaderMode\.ALLOW_ALL : DuplicateHeaderMode\.DISALLOW;\n\s*builder = builder\.setDuplicateHeaderMode\(mode\);/builder = builder.setAllowDuplicateHeaderNames(allow);/;
        s/((?:csvFormat|createCSVFormat\(context, variables\))\.builder\(\)(?:\.set\w+\([^()]*\))*)\.get\(\)/$1.build()/g;
        s/(\bbuilder|withHeader)\.get\(\)/$1.build()/g;
    ' "$OUT/src/$f" > "$OUT/csv19/$rel"
done
echo "Commons CSV 1.9 overlay ($OUT/csv19), the changes to NiFi's files:"
(cd "$OUT" && for f in $(cd csv19 && find . -name '*.java' | sort); do
    diff -u "$(find src -path "*/src/main/java/${f#./}")" "csv19/${f#./}" | grep '^[-+][^-+]' | sed "s|^|  ${f#./}: |"
done) || true

# 4. compile: javac -sourcepath compiles only the NiFi classes the driver reaches
SP="$OUT/csv19:$HERE/stubs"
for m in $MODULES; do SP="$SP:$OUT/src/$m/src/main/java"; done
rm -rf "$OUT/classes"
mkdir -p "$OUT/classes"
"$JAVA_HOME/bin/javac" -encoding UTF-8 -nowarn -proc:none -Xlint:none -d "$OUT/classes" -cp "$CP" -sourcepath "$SP" \
    "$HERE/NiFiRecords.java" "$HERE/DefaultsContext.java"
echo "$CP" > "$OUT/classpath"
( cd "$OUT/classes" && find org -name '*.class' ! -name '*$*' | sed 's/\.class$//; s|/|.|g' | sort ) > "$OUT/compiled-classes.txt"
echo "compiled: $(find "$OUT/classes" -name '*.class' | wc -l) class files ($(wc -l < "$OUT/compiled-classes.txt") top-level classes, list in $OUT/compiled-classes.txt) in $(( $(date +%s) - start )) s"
echo "run:      $JAVA_HOME/bin/java -Duser.timezone=UTC -cp \"$OUT/classes:\$(cat $OUT/classpath)\" NiFiRecords read|write|schema ..."
