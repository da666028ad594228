#!/usr/bin/env bash
# Builds and tests android/client-core on a plain JDK 17, without Gradle or Maven Central
# (machines with Gradle use settings.gradle instead). Libraries come from the system's jars
# (Debian: libokhttp-java, libgoogle-gson-java, junit5), or from $MJFL_JVM_LIBS.
#
#   android/build-jvm.sh            compile main and tests, run the tests (prints the summary)
#   android/build-jvm.sh --no-test  compile main only (what bin/mjfl-device calls)
#   android/build-jvm.sh --jvm-runtime  compile client-core, the app and its ExecuTorch test
#                                   double (app/src/jvmTest), no tests (what jvmTest/bin/train-tasks calls)
#   android/build-jvm.sh --app      the same and the app's tests, run nothing (what
#                                   app/bin/mjfl-selftest calls)
#
# Idempotent: a step runs only when its sources changed. Exit status is non-zero on a compile
# error, a failed test, when no test ran, or (full run) when the okhttp and gson jars here are not
# the versions the APK declares (gradle/libs.versions.toml): what this checks is what ships.
set -euo pipefail

ANDROID="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(dirname "$ANDROID")"
CORE="$ANDROID/client-core"
OUT="$CORE/build/jvm"
LIBS="${MJFL_JVM_LIBS:-/usr/share/java}"
CORE_DEPS="$LIBS/okhttp.jar:$LIBS/okio.jar:$LIBS/gson.jar"
JUNIT="$LIBS/junit-platform-console-standalone.jar"
GOLDEN="$REPO/tests/golden/protocol"
JAVAC_FLAGS=(--release 17 -Xlint:all -encoding UTF-8)

die() { echo "build-jvm.sh: $*" >&2; exit 1; }

# compile NAME SRC_DIR DEST CLASSPATH: javac every .java under SRC_DIR into DEST, unless DEST's
# stamp is newer than every source and lists the same files (a deleted source forces a rebuild).
compile() {
    local name="$1" src="$2" dest="$3" cp="$4"
    local stamp="$dest/.sources" list
    list="$(find "$src" -name '*.java' | LC_ALL=C sort)"
    [[ -n "$list" ]] || die "no Java sources under $src"
    if [[ -f "$stamp" && "$(cat "$stamp")" == "$list" && -z "$(find "$src" -newer "$stamp" -print -quit)" ]]; then
        return 0
    fi
    # Compile beside DEST, then rename it into place: a launcher running from DEST does not find
    # it emptied for the length of a compile.
    local tmp="$dest.tmp.$$"
    rm -rf "$tmp"
    mkdir -p "$tmp"
    # shellcheck disable=SC2086
    javac "${JAVAC_FLAGS[@]}" -d "$tmp" -cp "$cp" $list || { rm -rf "$tmp"; die "$name: compilation failed"; }
    printf '%s\n' "$list" >"$tmp/.sources"
    if [[ -d "$dest" ]]; then
        mv "$dest" "$dest.old.$$"
    fi
    mv "$tmp" "$dest"
    rm -rf "$dest.old.$$"
}

# stale DEST DEP...: forget DEST's stamp when a DEP was rebuilt after it (compile() looks at
# DEST's own sources only).
stale() {
    local dest="$1" dep
    shift
    [[ -f "$dest/.sources" ]] || return 0
    for dep in "$@"; do
        if [[ -n "$(find "$dep" -newer "$dest/.sources" -print -quit)" ]]; then
            rm -f "$dest/.sources"
            return 0
        fi
    done
}

check_libs() {
    local jar
    for jar in okhttp.jar okio.jar gson.jar "$@"; do
        [[ -f "$LIBS/$jar" ]] || die "missing $LIBS/$jar (set MJFL_JVM_LIBS to a folder that has it)"
    done
}

# The versions the APK declares (android/gradle/libs.versions.toml) must be those of the jars
# compiled and tested against here; else this script would vouch for libraries the APK does not
# ship. Each jar's version is the one Maven stamped into it (META-INF/maven/G/A/pom.properties),
# so a folder in MJFL_JVM_LIBS is read the same way as Debian's.
CATALOG="$ANDROID/gradle/libs.versions.toml"

# declared NAME: the catalog's [versions] NAME, written "V" or { strictly = "V" }.
declared() {
    sed -n -E '/^\[versions\]/,/^\[/ s/^'"$1"'[[:space:]]*=[[:space:]]*(\{[[:space:]]*strictly[[:space:]]*=[[:space:]]*)?"([^"]+)".*/\2/p' "$CATALOG"
}

# jar_version JAR GROUP ARTIFACT: the version in the jar's pom.properties (empty if it has none).
jar_version() {
    local entry="META-INF/maven/$2/$3/pom.properties" props="" tmp
    if command -v unzip >/dev/null; then
        props="$(unzip -p "$1" "$entry" 2>/dev/null)" || props=""
    else # the JDK's jar tool extracts to the current folder only
        tmp="$(mktemp -d)"
        props="$(cd "$tmp" && jar xf "$1" "$entry" 2>/dev/null && cat "$entry")" || props=""
        rm -rf "$tmp"
    fi
    sed -n 's/^version=//p' <<<"$props" | tr -d '\r'
}

check_versions() {
    local name jar group artifact want have
    [[ -f "$CATALOG" ]] || die "missing $CATALOG (the library versions the APK declares)"
    while read -r name jar group artifact; do
        want="$(declared "$name")"
        [[ -n "$want" ]] || die "$CATALOG declares no version \"$name\""
        have="$(jar_version "$LIBS/$jar" "$group" "$artifact")"
        [[ -n "$have" ]] || die "cannot tell the version of $LIBS/$jar: it has no META-INF/maven/$group/$artifact/pom.properties"
        [[ "$have" == "$want" ]] || die "$LIBS/$jar is $artifact $have, but the APK declares $want ($CATALOG):" \
            "declare $have there, or set MJFL_JVM_LIBS to a folder with $artifact $want"
    done <<'LIBRARIES'
okhttp okhttp.jar com.squareup.okhttp3 okhttp
gson gson.jar com.google.code.gson gson
LIBRARIES
}

build_core() {
    check_libs
    compile client-core "$CORE/src/main/java" "$OUT/classes" "$CORE_DEPS"
}

test_core() {
    check_libs junit-platform-console-standalone.jar
    [[ -f "$GOLDEN/manifest.json" ]] || die "golden frames not found at $GOLDEN"
    stale "$OUT/test-classes" "$OUT/classes"
    compile client-core-tests "$CORE/src/test/java" "$OUT/test-classes" "$OUT/classes:$CORE_DEPS:$JUNIT"
    # The console launcher prints failures in full and the summary table; exit 1 on a failure,
    # 2 when no test was found.
    java -Dmjfl.golden="$GOLDEN" -Djava.util.logging.config.file="$CORE/src/test/resources/logging.properties" \
        -jar "$JUNIT" \
        --disable-banner --disable-ansi-colors --details=summary --fail-if-no-tests \
        --class-path "$OUT/test-classes:$CORE/src/test/resources:$OUT/classes:$CORE_DEPS" \
        --scan-class-path "$OUT/test-classes"
}

# Hook for the Android `app` module (its author's section): it must not need Gradle, and must
# leave this script quiet on success.
#
# android/app: its sources are compiled against compile-only stubs of the Android SDK and of
# ExecuTorch (app/src/stubs, never packaged) and client-core, so that a typo or a wrong signature
# fails the build; then the JUnit tests of its plain-Java parts (the training contract) run here.
# Their output is shown only when one fails.
APP="$ANDROID/app"
APP_OUT="$APP/build/jvm"

build_app_classes() {
    check_libs junit4.jar
    # JUnit 4 for the stub of androidx.test's runner (the instrumented test's, below).
    compile app-stubs "$APP/src/stubs/java" "$APP_OUT/stubs" "$LIBS/junit4.jar"
    stale "$APP_OUT/classes" "$APP_OUT/stubs" "$OUT/classes"
    compile app "$APP/src/main/java" "$APP_OUT/classes" "$APP_OUT/stubs:$OUT/classes:$CORE_DEPS"
}

# android/app/src/jvmTest: a test double of ExecuTorch's Java API that runs programs in
# ExecuTorch's Python runtime, and the harness that trains tasks with the app's classes on it
# (tests/android/test_jvm_training.py). Compiled against the app's classes, never the stubs:
# on its class path the double takes their place, as the AAR does on a phone.
build_jvm_runtime() {
    stale "$APP_OUT/jvm-runtime" "$APP_OUT/classes"
    compile app-jvm-runtime "$APP/src/jvmTest/java" "$APP_OUT/jvm-runtime" "$APP_OUT/classes:$OUT/classes:$CORE_DEPS"
}

# The app's JUnit tests; and the instrumented test (src/androidTest: JUnit 4 on a phone or an
# emulator, ./gradlew connectedAndroidTest), only type-checked here, against the same stubs.
build_app_tests() {
    local deps="$OUT/classes:$CORE_DEPS"
    check_libs junit-platform-console-standalone.jar junit4.jar
    stale "$APP_OUT/test-classes" "$APP_OUT/classes"
    compile app-tests "$APP/src/test/java" "$APP_OUT/test-classes" "$APP_OUT/classes:$deps:$JUNIT"
    stale "$APP_OUT/android-test-classes" "$APP_OUT/classes"
    compile app-android-tests "$APP/src/androidTest/java" "$APP_OUT/android-test-classes" \
        "$APP_OUT/classes:$APP_OUT/stubs:$deps:$LIBS/junit4.jar"
}

build_app() {
    local deps="$OUT/classes:$CORE_DEPS" log
    build_app_classes
    build_jvm_runtime
    build_app_tests
    # The stubs are not on the tests' class path: a test that reaches android.* or ExecuTorch fails.
    if ! log="$(java -Dmjfl.randomness="$REPO/tests/golden/randomness.json" -Dmjfl.app.main="$APP/src/main" \
            -jar "$JUNIT" --disable-banner --disable-ansi-colors --details=summary --fail-if-no-tests \
            --class-path "$APP_OUT/test-classes:$APP/src/test/resources:$APP_OUT/classes:$deps" \
            --scan-class-path "$APP_OUT/test-classes" 2>&1)"; then
        printf '%s\n' "$log" >&2
        die "android/app: tests failed"
    fi
}

main() {
    command -v javac >/dev/null || die "javac not found (JDK 17 needed)"
    # Builds at once (several devices' launchers, tests on two workers) would rename each other's
    # folders away mid-compile: they take turns, and a later one finds the work done.
    mkdir -p "$CORE/build"
    exec 9>"$CORE/build/.lock"
    if command -v flock >/dev/null; then flock 9; fi
    build_core
    case "${1:-}" in
        # The JVM launchers (bin/mjfl-device, app/src/jvmTest/bin/train-tasks) run with whatever
        # jars are here.
        --no-test) return 0 ;;
        --jvm-runtime) build_app_classes; build_jvm_runtime; return 0 ;;
        --app) build_app_classes; build_jvm_runtime; build_app_tests; return 0 ;;
    esac
    check_versions
    build_app
    test_core
}

main "$@"
