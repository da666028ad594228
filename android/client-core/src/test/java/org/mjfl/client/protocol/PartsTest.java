package org.mjfl.client.protocol;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.List;
import java.util.Random;
import org.junit.jupiter.api.Test;

/** Section 4: splitting and joining parts, and every way a part set can be wrong. */
class PartsTest {
    static byte[] message(int floats) {
        float[] v = new float[floats];
        for (int i = 0; i < floats; i++) {
            v[i] = i;
        }
        return Frames.bytes(Codec.encodeBinary(new Message.Result("t", "j", 1, 1, 0, new Message.Timing(0, 0, null), null,
                List.of(Tensor.ofFloats("w", new long[] {floats}, v), Tensor.ofFloats("b", new long[] {3}, new float[3]))), 1));
    }

    static Parts.Reassembler reassembler() {
        return new Parts.Reassembler(1, 1L << 20, 65536L);
    }

    static ProtocolException refused(String code, Runnable r) {
        ProtocolException e = assertThrows(ProtocolException.class, r::run);
        assertEquals(code, e.code(), e.reason());
        return e;
    }

    @Test
    void splitThenJoinGivesTheMessageBack() {
        Random rng = new Random(5);
        for (int i = 0; i < 300; i++) {
            byte[] m = message(rng.nextInt(3000));
            int max = 9 + rng.nextInt(m.length + 200);
            List<ByteBuffer> parts = Parts.split(ByteBuffer.wrap(m), max);
            int payloadOffset = ByteBuffer.wrap(m).order(ByteOrder.LITTLE_ENDIAN).getInt(12);
            if (m.length <= max || Math.max(max, payloadOffset) >= m.length) {
                assertEquals(1, parts.size());
                continue;
            }
            ByteBuffer first = parts.get(0).duplicate().order(ByteOrder.LITTLE_ENDIAN);
            assertEquals(Codec.FLAG_MORE, first.getShort(6));
            assertTrue(first.remaining() >= payloadOffset && first.remaining() < m.length);
            Parts.Reassembler r = reassembler();
            ByteBuffer whole = null;
            for (int k = 0; k < parts.size(); k++) {
                ByteBuffer p = parts.get(k).duplicate().order(ByteOrder.LITTLE_ENDIAN);
                if (k > 0) {
                    assertTrue(p.remaining() <= max && p.remaining() > Parts.PART_HEADER);
                    assertEquals(Codec.MAGIC_PART, p.getInt(0));
                    assertEquals(k, p.getInt(4));
                }
                whole = r.feed(p);
                assertEquals(k == parts.size() - 1, whole != null);
            }
            assertArrayEquals(m, Frames.bytes(whole));
            assertFalse(r.inProgress());
        }
    }

    @Test
    void wholeMessagesPassThrough() {
        byte[] m = message(10);
        assertArrayEquals(m, Frames.bytes(reassembler().feed(ByteBuffer.wrap(m))));
    }

    @Test
    void partSetErrorsAreBadFrame() {
        byte[] m = message(200);
        List<ByteBuffer> parts = Parts.split(ByteBuffer.wrap(m), 400);
        assertTrue(parts.size() >= 3);
        refused(Codes.BAD_FRAME, () -> reassembler().feed(parts.get(1)));
        Parts.Reassembler outOfOrder = reassembler();
        outOfOrder.feed(parts.get(0));
        refused(Codes.BAD_FRAME, () -> outOfOrder.feed(parts.get(2)));
        Parts.Reassembler another = reassembler();
        another.feed(parts.get(0));
        refused(Codes.BAD_FRAME, () -> another.feed(ByteBuffer.wrap(message(1))));
        Parts.Reassembler emptyPart = reassembler();
        emptyPart.feed(parts.get(0));
        refused(Codes.BAD_FRAME, () -> emptyPart.feed(ByteBuffer.wrap(new byte[] {'M', 'J', 'F', 'C', 1, 0, 0, 0})));
        Parts.Reassembler tooLong = reassembler();
        tooLong.feed(parts.get(0));
        ByteBuffer big = ByteBuffer.allocate(8 + m.length).order(ByteOrder.LITTLE_ENDIAN).putInt(Codec.MAGIC_PART).putInt(1);
        refused(Codes.BAD_FRAME, () -> tooLong.feed(big.clear()));
        assertFalse(tooLong.inProgress(), "a refused set is dropped");
    }

    @Test
    void firstPartMustHoldTheHeadersAndLessThanTheWhole() {
        byte[] m = message(200);
        int payloadOffset = ByteBuffer.wrap(m).order(ByteOrder.LITTLE_ENDIAN).getInt(12);
        byte[] shortFirst = java.util.Arrays.copyOf(m, payloadOffset - 1);
        ByteBuffer.wrap(shortFirst).order(ByteOrder.LITTLE_ENDIAN).putShort(6, (short) 1);
        refused(Codes.BAD_FRAME, () -> reassembler().feed(ByteBuffer.wrap(shortFirst)));
        byte[] wholeWithMore = m.clone();
        ByteBuffer.wrap(wholeWithMore).order(ByteOrder.LITTLE_ENDIAN).putShort(6, (short) 1);
        refused(Codes.BAD_FRAME, () -> reassembler().feed(ByteBuffer.wrap(wholeWithMore)));
        byte[] flags3 = java.util.Arrays.copyOf(m, payloadOffset + 8);
        ByteBuffer.wrap(flags3).order(ByteOrder.LITTLE_ENDIAN).putShort(6, (short) 3);
        refused(Codes.BAD_FRAME, () -> reassembler().feed(ByteBuffer.wrap(flags3)));
    }

    /** "A receiver checks the first part's headers and limits before the rest arrives." */
    @Test
    void limitsAndHeadersAreCheckedOnTheFirstPart() {
        byte[] m = message(2000);
        List<ByteBuffer> parts = Parts.split(ByteBuffer.wrap(m), 1000);
        refused(Codes.MESSAGE_TOO_BIG, () -> new Parts.Reassembler(1, 5000L, null).feed(parts.get(0)));
        refused(Codes.MESSAGE_TOO_BIG, () -> new Parts.Reassembler(1, null, 100L).feed(parts.get(0)));
        refused(Codes.MESSAGE_TOO_BIG, () -> new Parts.Reassembler(1, 5000L, null).feed(ByteBuffer.wrap(m)));
        refused(Codes.BAD_FRAME, () -> new Parts.Reassembler(2, null, null).feed(parts.get(0)));
        ByteBuffer badJson = parts.get(0).duplicate();
        byte[] b = Frames.bytes(badJson);
        b[24] = 'x';
        refused(Codes.BAD_MESSAGE, () -> reassembler().feed(ByteBuffer.wrap(b)));
        assertNull(new Parts.Reassembler(1, (long) m.length, 65536L).feed(parts.get(0)));
    }
}
