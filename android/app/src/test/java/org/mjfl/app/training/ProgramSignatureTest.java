package org.mjfl.app.training;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.util.List;
import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;

class ProgramSignatureTest {
    static byte[] fixture() throws IOException {
        try (InputStream in = ProgramSignatureTest.class.getResourceAsStream("/programs/cnn-b-1x8x8.pte")) {
            if (in == null) {
                throw new IOException("test resource programs/cnn-b-1x8x8.pte is missing");
            }
            return in.readAllBytes();
        }
    }

    @Test
    void readsAnExportedProgram() throws Exception {
        ProgramSignature s = ProgramSignature.read(ByteBuffer.wrap(fixture()), "forward");
        assertEquals(256, s.maxBatch());
        assertArrayEquals(new long[] {1, 8, 8}, s.sampleShape());
        // cnn-b's dropout sites, as mjfl.jobs.models.dropout_shapes reports them for 1x8x8
        List<long[]> noise = s.noiseFeatures();
        assertEquals(2, noise.size());
        assertArrayEquals(new long[] {64, 7, 7}, noise.get(0));
        assertArrayEquals(new long[] {32, 6, 6}, noise.get(1));
        assertArrayEquals(new long[] {32, 6, 6, 256}, s.inputs().get(3).sizes());
        assertEquals(ProgramSignature.SCALAR_LONG, s.inputs().get(1).scalarType());
        assertEquals(List.of("model.conv1.weight", "model.conv1.bias", "model.conv2.weight", "model.conv2.bias",
                "model.fc.weight", "model.fc.bias"), s.parameterNames());
        assertArrayEquals(new long[] {64, 1, 2, 2}, s.parameterShapes().get(0));
        assertArrayEquals(new long[] {2, 1152}, s.parameterShapes().get(4));
        assertEquals(2, s.gradientsIndex());
        assertEquals(8, s.parametersIndex());
        assertEquals(0, s.batchNormLayers());
        // forward's non_const_buffer_sizes, [0, 35776048] (the index methods plan none), as
        // executorch.exir._serialize._program.deserialize_pte_binary reads the file.
        assertEquals(35_776_048L, s.plannedBytes());
    }

    @Test
    void readsAProgramFileWithoutLoadingIt(@org.junit.jupiter.api.io.TempDir java.nio.file.Path dir) throws Exception {
        java.nio.file.Path pte = java.nio.file.Files.write(dir.resolve("p.pte"), fixture());
        ProgramSignature s = ProgramSignature.read(pte, "forward");
        assertEquals(35_776_048L, s.plannedBytes());
        assertEquals(6, s.parameterNames().size());
        assertThrows(java.io.IOException.class, () -> ProgramSignature.read(dir.resolve("absent.pte"), "forward"));
    }

    @Test
    void refusesWhatIsNotATrainingProgram() throws Exception {
        byte[] pte = fixture();
        assertThrows(ProgramException.class, () -> ProgramSignature.read(ByteBuffer.wrap(new byte[3]), "forward"));
        byte[] wrongId = pte.clone();
        wrongId[4] = 'X';
        assertThrows(ProgramException.class, () -> ProgramSignature.read(ByteBuffer.wrap(wrongId), "forward"));
        assertThrows(ProgramException.class, () -> ProgramSignature.read(ByteBuffer.wrap(pte), "predict"));
        byte[] cut = java.util.Arrays.copyOf(pte, pte.length / 3);
        assertThrows(ProgramException.class, () -> ProgramSignature.read(ByteBuffer.wrap(cut), "forward"));
    }

    @Test
    void corruptProgramsFailAsProgramExceptionsOnly() throws Exception {
        byte[] pte = fixture();
        SplittableRandom rng = new SplittableRandom(7);
        for (int trial = 0; trial < 300; trial++) {
            byte[] bad = pte.clone();
            for (int k = 0; k < 4; k++) {
                // The flatbuffer (metadata) is the file's first part; the weights follow it.
                bad[rng.nextInt(Math.min(bad.length, 40_000))] = (byte) rng.nextInt(256);
            }
            try {
                ProgramSignature.read(ByteBuffer.wrap(bad), "forward");
            } catch (ProgramException expected) {
                // refused with a reason: fine
            } catch (RuntimeException e) {
                fail("trial " + trial + " threw " + e);
            }
        }
    }

    @Test
    void signaturesFromPartsAreCheckedLikeFiles() {
        ProgramSignature.TensorSpec x = new ProgramSignature.TensorSpec(ProgramSignature.SCALAR_FLOAT, new long[] {4, 3});
        ProgramSignature.TensorSpec y = new ProgramSignature.TensorSpec(ProgramSignature.SCALAR_LONG, new long[] {4});
        ProgramSignature.TensorSpec badNoise = new ProgramSignature.TensorSpec(ProgramSignature.SCALAR_FLOAT,
                new long[] {4, 5});
        assertThrows(ProgramException.class, () -> ProgramSignature.of(List.of(x, y, badNoise), List.of(), List.of(), 2));
        ProgramSignature.TensorSpec yWrong = new ProgramSignature.TensorSpec(ProgramSignature.SCALAR_FLOAT,
                new long[] {4});
        assertThrows(ProgramException.class, () -> ProgramSignature.of(List.of(x, yWrong), List.of(), List.of(), 2));
        assertThrows(ProgramException.class, () -> ProgramSignature.of(List.of(x, y), List.of(), List.of(), 3));
    }
}
