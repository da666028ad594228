package org.mjfl.app.training;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.FloatBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.stream.Stream;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

/** The task generator against the Python reference's test vectors, and its invariants. */
class TaskRandomTest {
    /** tests/golden/randomness.json: passed by the build (-Dmjfl.randomness), else found above the working directory. */
    static Path vectors() throws IOException {
        String p = System.getProperty("mjfl.randomness");
        if (p != null) {
            return Paths.get(p);
        }
        for (Path d = Paths.get("").toAbsolutePath(); d != null; d = d.getParent()) {
            Path f = d.resolve("tests/golden/randomness.json");
            if (Files.isRegularFile(f)) {
                return f;
            }
        }
        throw new IOException("tests/golden/randomness.json not found (set -Dmjfl.randomness)");
    }

    @TestFactory
    Stream<DynamicTest> matchesThePythonReferenceBitForBit() throws IOException {
        JsonObject golden = JsonParser.parseString(Files.readString(vectors())).getAsJsonObject();
        JsonArray cases = golden.getAsJsonArray("cases");
        assertTrue(cases.size() >= 4, "test vectors");
        List<DynamicTest> tests = new ArrayList<>();
        for (JsonElement e : cases) {
            JsonObject c = e.getAsJsonObject();
            long seed = c.get("seed").getAsLong();
            tests.add(DynamicTest.dynamicTest("seed " + seed, () -> {
                TaskRandom r = new TaskRandom(seed);
                assertEquals(Long.parseUnsignedLong(c.get("order_key").getAsString()), r.orderKey(), "ORDER");
                assertEquals(Long.parseUnsignedLong(c.get("noise_key").getAsString()), r.noiseKey(), "NOISE");
                for (JsonElement pe : c.getAsJsonArray("permutations")) {
                    JsonObject p = pe.getAsJsonObject();
                    int[] want = ints(p.getAsJsonArray("order"));
                    assertArrayEquals(want, r.permutation(p.get("epoch").getAsLong(), p.get("n").getAsInt()), p.toString());
                }
                // One running counter across the listed draws, in order.
                for (JsonElement ne : c.getAsJsonArray("noise")) {
                    JsonArray values = ne.getAsJsonObject().getAsJsonArray("values");
                    FloatBuffer got = FloatBuffer.allocate(values.size());
                    r.fillNoise(got);
                    for (int i = 0; i < values.size(); i++) {
                        // The vectors hold float32 values printed as doubles: exact.
                        assertEquals(values.get(i).getAsDouble(), (double) got.get(i), "noise " + i + " of " + ne);
                    }
                }
            }));
        }
        return tests.stream();
    }

    private static int[] ints(JsonArray a) {
        int[] out = new int[a.size()];
        for (int i = 0; i < out.length; i++) {
            out[i] = a.get(i).getAsInt();
        }
        return out;
    }

    @Test
    void drawIsSplitMixSixtyFour() {
        // SplitMix64 seeded with 0: its first outputs, as java.util.SplittableRandom(0).nextLong() gives them
        // (that generator's state advances by the same GAMMA and mixes with the same mix64).
        java.util.SplittableRandom reference = new java.util.SplittableRandom(0);
        for (int i = 0; i < 5; i++) {
            assertEquals(reference.nextLong(), TaskRandom.draw(0, i));
        }
    }

    @Test
    void everyEpochIsAPermutationAndEpochsDiffer() {
        TaskRandom r = new TaskRandom(3);
        for (int n : new int[] {0, 1, 2, 7, 100, 1000}) {
            int[] p = r.permutation(0, n);
            int[] sorted = p.clone();
            Arrays.sort(sorted);
            for (int i = 0; i < n; i++) {
                assertEquals(i, sorted[i]);
            }
        }
        assertTrue(!Arrays.equals(r.permutation(0, 50), r.permutation(1, 50)));
        assertArrayEquals(r.permutation(4, 50), new TaskRandom(3).permutation(4, 50), "a function of seed and epoch");
    }

    @Test
    void permutationsAreUniformOverSeeds() {
        int n = 4;
        int trials = 48_000;
        int[][] counts = new int[n][n];
        for (int s = 0; s < trials; s++) {
            int[] p = new TaskRandom(s).permutation(s % 3, n);
            for (int i = 0; i < n; i++) {
                counts[i][p[i]]++;
            }
        }
        for (int[] row : counts) {
            for (int c : row) {
                // expectation 12000, standard deviation ~95
                assertTrue(Math.abs(c - trials / n) < 600, "count " + c);
            }
        }
    }

    @Test
    void noiseIsInTheUnitIntervalWithTwentyFourBits() {
        assertTrue(0xffffff * 0x1.0p-24f < 1f);
        TaskRandom r = new TaskRandom(9);
        FloatBuffer b = ByteBuffer.allocateDirect(4 * 10_000).asFloatBuffer();
        r.fillNoise(b);
        double sum = 0;
        for (int i = 0; i < b.capacity(); i++) {
            float u = b.get(i);
            assertTrue(u >= 0f && u < 1f);
            assertEquals(u, (float) (Math.round(u * 0x1.0p24) * 0x1.0p-24), "24 bits");
            sum += u;
        }
        assertEquals(0.5, sum / b.capacity(), 0.02);
        assertEquals(10_000, r.noiseDrawn());
    }

    @Test
    void seedsAreSixtyThreeBits() {
        assertThrows(IllegalArgumentException.class, () -> new TaskRandom(-1));
        assertEquals(TaskRandom.MAX_SEED, new TaskRandom(Long.MAX_VALUE).seed());
    }
}
