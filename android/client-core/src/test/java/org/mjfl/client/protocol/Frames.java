package org.mjfl.client.protocol;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;

/** Test helpers: hand-built binary frames (to break one rule at a time) and the golden folder. */
public final class Frames {
    private Frames() {}

    /** A binary message with a correct fixed header around any JSON header and payload. */
    public static byte[] binary(String headerJson, byte[] payload) {
        byte[] h = headerJson.getBytes(StandardCharsets.UTF_8);
        int off = (int) Codec.align64(24 + h.length);
        ByteBuffer b = ByteBuffer.allocate(off + payload.length).order(ByteOrder.LITTLE_ENDIAN);
        b.putInt(Codec.MAGIC).putShort((short) 1).putShort((short) 0).putInt(h.length).putInt(off)
                .putLong(payload.length).put(h).position(off);
        b.put(payload);
        return b.array();
    }

    public static byte[] bytes(ByteBuffer b) {
        ByteBuffer d = b.duplicate();
        byte[] out = new byte[d.remaining()];
        d.get(out);
        return out;
    }

    /** tests/golden/protocol, passed by the build (-Dmjfl.golden), else found from the working directory. */
    public static Path goldenDir() {
        String p = System.getProperty("mjfl.golden");
        if (p != null) {
            return Paths.get(p);
        }
        for (Path d = Paths.get("").toAbsolutePath(); d != null; d = d.getParent()) {
            Path g = d.resolve("tests/golden/protocol");
            if (Files.isRegularFile(g.resolve("manifest.json"))) {
                return g;
            }
        }
        throw new IllegalStateException("golden frames not found: pass -Dmjfl.golden=<repo>/tests/golden/protocol");
    }

    public static String sha(byte[] b) {
        return Sha256.of(b);
    }

    /** float32 little-endian bytes. */
    public static byte[] f32(float... v) {
        ByteBuffer b = ByteBuffer.allocate(v.length * 4).order(ByteOrder.LITTLE_ENDIAN);
        for (float x : v) {
            b.putFloat(x);
        }
        return b.array();
    }

    /** int64 little-endian bytes. */
    public static byte[] i64(long... v) {
        ByteBuffer b = ByteBuffer.allocate(v.length * 8).order(ByteOrder.LITTLE_ENDIAN);
        for (long x : v) {
            b.putLong(x);
        }
        return b.array();
    }
}
