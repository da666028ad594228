package org.mjfl.client.protocol;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import org.junit.jupiter.api.Test;

class TensorTest {
    @Test
    void valuesAreLittleEndianAndConverted() {
        Tensor u8 = Tensor.ofBytes("u", DType.UINT8, new long[] {2}, new byte[] {(byte) 255, 1});
        assertArrayEquals(new long[] {255, 1}, u8.toLongs());
        Tensor i8 = Tensor.ofBytes("i", DType.INT8, new long[] {2}, new byte[] {(byte) 255, 1});
        assertArrayEquals(new long[] {-1, 1}, i8.toLongs());
        Tensor i64 = Tensor.ofBytes("l", DType.INT64, new long[] {1}, Frames.i64(-3));
        assertArrayEquals(new double[] {-3}, i64.toDoubles());
        Tensor h = Tensor.ofBytes("h", DType.FLOAT16, new long[] {1}, new byte[] {0, 0x3c});
        assertArrayEquals(new float[] {1f}, h.toFloats());
        assertThrows(IllegalStateException.class, h::toLongs);
    }

    @Test
    void sizeMustMatchDtypeAndShape() {
        assertThrows(IllegalArgumentException.class, () -> new Tensor("w", DType.FLOAT32, new long[] {3}, ByteBuffer.allocate(8)));
        assertEquals(1, Tensor.numel(new long[] {}));
        assertEquals(0, Tensor.numel(new long[] {4, 0}));
    }

    @Test
    void finiteness() {
        assertFalse(Tensor.ofFloats("w", new long[] {2}, new float[] {0, Float.NEGATIVE_INFINITY}).allFinite());
        assertFalse(Tensor.ofBytes("d", DType.FLOAT64, new long[] {1}, Frames.i64(Double.doubleToLongBits(Double.NaN))).allFinite());
        assertFalse(Tensor.ofBytes("h", DType.FLOAT16, new long[] {1}, new byte[] {1, 0x7c}).allFinite());
        assertTrue(Tensor.ofBytes("l", DType.INT64, new long[] {1}, Frames.i64(-1)).allFinite());
    }
}
