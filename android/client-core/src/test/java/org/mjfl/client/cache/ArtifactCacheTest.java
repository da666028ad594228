package org.mjfl.client.cache;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.mjfl.client.protocol.Sha256;

/** Section 6: artifacts by sha256, verified on write and load; the hello lists only whole ones. */
class ArtifactCacheTest {
    @TempDir
    Path dir;

    static final byte[] A = "program bytes".getBytes(StandardCharsets.US_ASCII);
    static final String SHA_A = Sha256.of(A);

    @Test
    void storesUnderTheHashAndLoadsVerified() throws Exception {
        ArtifactCache c = new ArtifactCache(dir);
        c.put(SHA_A, ByteBuffer.wrap(A));
        assertArrayEquals(A, c.load(SHA_A).orElseThrow());
        assertEquals(List.of(SHA_A), c.list());
        assertEquals(dir.resolve(SHA_A), c.path(SHA_A).orElseThrow());
        assertTrue(c.contains(SHA_A));
    }

    @Test
    void aShardIsXThenYUnderOneHash() throws Exception {
        ArtifactCache c = new ArtifactCache(dir);
        byte[] x = {1, 2, 3};
        byte[] y = {4, 5};
        String sha = Sha256.of(new byte[] {1, 2, 3, 4, 5});
        c.put(sha, ByteBuffer.wrap(x), ByteBuffer.wrap(y));
        assertArrayEquals(new byte[] {1, 2, 3, 4, 5}, c.load(sha).orElseThrow());
    }

    @Test
    void contentThatDoesNotMatchItsHashIsNeverWritten() throws Exception {
        ArtifactCache c = new ArtifactCache(dir);
        assertThrows(IllegalArgumentException.class, () -> c.put("0".repeat(64), ByteBuffer.wrap(A)));
        assertThrows(IllegalArgumentException.class, () -> c.put("not-a-hash", ByteBuffer.wrap(A)));
        try (var files = Files.list(dir)) {
            assertEquals(0, files.count(), "no file, no temporary left behind");
        }
    }

    @Test
    void aCorruptFileIsNotListedAndIsDeleted() throws Exception {
        new ArtifactCache(dir).put(SHA_A, ByteBuffer.wrap(A));
        Files.write(dir.resolve(SHA_A), "tampered".getBytes(StandardCharsets.US_ASCII));
        ArtifactCache fresh = new ArtifactCache(dir);
        assertEquals(List.of(), fresh.list());
        assertFalse(Files.exists(dir.resolve(SHA_A)));
    }

    @Test
    void aFileChangedUnderARunningCacheIsRecheckedAndRefused() throws Exception {
        ArtifactCache c = new ArtifactCache(dir);
        c.put(SHA_A, ByteBuffer.wrap(A));
        assertEquals(List.of(SHA_A), c.list());
        Files.write(dir.resolve(SHA_A), "a different length".getBytes(StandardCharsets.US_ASCII));
        assertEquals(List.of(), c.list());
        assertTrue(c.load(SHA_A).isEmpty());
        assertTrue(c.path(SHA_A).isEmpty());
    }

    @Test
    void aCorruptFileFailsToLoad() throws Exception {
        ArtifactCache c = new ArtifactCache(dir);
        c.put(SHA_A, ByteBuffer.wrap(A));
        byte[] flipped = A.clone();
        flipped[0] ^= 1;
        Files.write(dir.resolve(SHA_A), flipped); // same size: load hashes regardless
        assertTrue(c.load(SHA_A).isEmpty());
        assertFalse(Files.exists(dir.resolve(SHA_A)));
    }

    @Test
    void missingFilesAndStrangersAreNotListed() throws Exception {
        ArtifactCache c = new ArtifactCache(dir);
        Files.write(dir.resolve("notes.txt"), A);
        Files.write(dir.resolve(SHA_A + ".123.tmp"), A);
        assertEquals(List.of(), c.list());
        assertTrue(c.load(SHA_A).isEmpty());
        assertTrue(c.load("../../etc/passwd").isEmpty());
    }
}
