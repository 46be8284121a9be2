#!/bin/bash
# How much does Commons CSV 1.9.0 (Debian) instead of 1.14.1 (NiFi 2.11) change NiFi's CSV reader and writer?
# Runs NiFi's own unit tests of them, TestWriteCSVResult and TestCSVRecordReader at the same tag (their expected
# strings were written for 1.14.1), against the classes build.sh compiled with 1.9.0.
#
#   integration/nifi-records/csv-tests.sh [OUT]     (after build.sh; OUT as there, default /tmp/nifi-records)
#
# Needs: apt-get install junit5. The tests are copied to OUT/csv-tests with mechanical changes only, printed below:
# CSVFormat.Builder get() -> build() (every .get() in these two files is one), DuplicateHeaderMode.DISALLOW ->
# setAllowDuplicateHeaderNames(false), Mockito.mock(ComponentLog.class) -> new ComponentLog() { } (no Mockito here;
# stubs/ ComponentLog has default methods). A failing test names a place where 1.9.0 and 1.14.1 differ (or a
# test that cannot run here: read its message).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${1:-/tmp/nifi-records}
NIFI_GIT=${NIFI_GIT:-/work/.mirror/apache+nifi/repo}
NIFI_TAG=$(cat "$OUT/src.tag")
JAVA_HOME=${JAVA_HOME:-/usr/lib/jvm/temurin-25-jdk-amd64}
JUNIT=/usr/share/java/junit-platform-console-standalone.jar
[ -f "$JUNIT" ] || { echo "missing $JUNIT: apt-get install junit5" >&2; exit 1; }
M=nifi-extension-bundles/nifi-standard-services/nifi-record-serialization-services-bundle/nifi-record-serialization-services
T="$OUT/csv-tests"
rm -rf "$T"
mkdir -p "$T/orig" "$T/java" "$T/classes"
git --git-dir="$NIFI_GIT" archive --format=tar "$NIFI_TAG" "$M/src/test/java/org/apache/nifi/csv/TestWriteCSVResult.java" \
    "$M/src/test/java/org/apache/nifi/csv/TestCSVRecordReader.java" "$M/src/test/resources/csv" 2> "$T/git.err" \
    | tar -x -C "$T/orig"
for name in TestWriteCSVResult TestCSVRecordReader; do
    perl -0pe '
        s/\.get\(\)/.build()/g;
        s/import org\.apache\.commons\.csv\.DuplicateHeaderMode;\n//;
        s/\.setDuplicateHeaderMode\(DuplicateHeaderMode\.DISALLOW\)/.setAllowDuplicateHeaderNames(false)/g;
        s/import org\.mockito\.Mockito;\n//;
        s/Mockito\.mock\(ComponentLog\.class\)/new ComponentLog() { }/g;
    ' "$T/orig/$M/src/test/java/org/apache/nifi/csv/$name.java" > "$T/java/$name.java"
    echo "changes to $name.java:"
    diff "$T/orig/$M/src/test/java/org/apache/nifi/csv/$name.java" "$T/java/$name.java" | grep '^[<>]' | sort | uniq -c | sed 's/^/  /' || true
done
CP="$OUT/classes:$(cat "$OUT/classpath"):$JUNIT"
SP="$OUT/csv19:$HERE/stubs"
while read -r d; do SP="$SP:$d"; done < <(find "$OUT/src" -type d -path '*/src/main/java')
"$JAVA_HOME/bin/javac" -encoding UTF-8 -nowarn -proc:none -Xlint:none -d "$T/classes" -cp "$CP" -sourcepath "$SP" "$T"/java/*.java
# the tests open src/test/resources/... relative to the module folder
cd "$T/orig/$M"
"$JAVA_HOME/bin/java" -Duser.timezone=UTC -jar "$JUNIT" --disable-banner --details=tree --disable-ansi-colors \
    -cp "$T/classes:$CP" --select-class org.apache.nifi.csv.TestWriteCSVResult \
    --select-class org.apache.nifi.csv.TestCSVRecordReader 2>&1 | grep -v '^SLF4J' || true
