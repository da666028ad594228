package android.content.res;

import java.io.IOException;
import java.io.InputStream;

/** Compile-only stub of the Android SDK (API 34) API the app uses; see src/stubs/README.md. */
public final class AssetManager {
    AssetManager() {
        throw new UnsupportedOperationException("stub");
    }

    public String[] list(String path) throws IOException {
        throw new UnsupportedOperationException("stub");
    }

    public InputStream open(String fileName) throws IOException {
        throw new UnsupportedOperationException("stub");
    }
}
