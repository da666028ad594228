package org.mjfl.app;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertTrue;

import android.app.Instrumentation;
import android.content.Context;
import android.content.res.AssetManager;
import androidx.test.ext.junit.runners.AndroidJUnit4;
import androidx.test.platform.app.InstrumentationRegistry;
import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.List;
import org.junit.Test;
import org.junit.runner.RunWith;
import org.mjfl.app.selftest.GoldenSet;
import org.mjfl.app.selftest.SelfTest;

/**
 * The first-day check's golden self-test as an instrumented test (docs/phones.md, "First-day
 * check"): every zoo model's golden case trained by the app's real ExecuTorch runtime, in the
 * app's process, compared with the Python runtime's weights. The set is in the test APK's
 * assets, written before the build by
 *
 * <pre>mjfl devices golden android/app/src/androidTest/assets/golden</pre>
 *
 * (the CI workflow does it), then {@code ./gradlew connectedAndroidTest} on a phone or emulator.
 */
@RunWith(AndroidJUnit4.class)
public class GoldenSelfTest {
    private static final String ASSETS = "golden";

    @Test
    public void everyZooModelTrainsAsThePythonRuntimeDoes() throws Exception {
        Instrumentation instrumentation = InstrumentationRegistry.getInstrumentation();
        AssetManager assets = instrumentation.getContext().getAssets(); // the test APK's
        String[] cases = assets.list(ASSETS);
        assertTrue("no golden set in the test's assets: run `mjfl devices golden "
                + "android/app/src/androidTest/assets/golden` before building", cases != null && cases.length > 0);
        Context app = instrumentation.getTargetContext();
        Path root = app.getCacheDir().toPath().resolve("golden-test");
        Path set = root.resolve("set");
        copy(assets, ASSETS, set);

        List<String> lines = new ArrayList<>();
        SelfTest.Outcome outcome = AndroidSelfTest.create(app, lines::add).run("instrumented", set, root.resolve("work"));

        assertTrue("the self-test's lines:\n" + String.join("\n", lines), outcome.passed());
        assertEquals(GoldenSet.read(set).cases(), outcome.passedCases());
    }

    /** Copies the asset folder {@code from} (recursively) to {@code to}. */
    private static void copy(AssetManager assets, String from, Path to) throws IOException {
        String[] children = assets.list(from);
        if (children == null || children.length == 0) {
            Files.createDirectories(to.getParent());
            try (InputStream in = assets.open(from)) {
                Files.copy(in, to, StandardCopyOption.REPLACE_EXISTING);
            }
            return;
        }
        for (String child : children) {
            copy(assets, from + "/" + child, to.resolve(child));
        }
    }
}
