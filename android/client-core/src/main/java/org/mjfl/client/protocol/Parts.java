package org.mjfl.client.protocol;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.List;

/**
 * Section 4: a binary message larger than one WebSocket message travels as a first part (the
 * message's first bytes, flag MORE set) and continuation parts ({@code MJFC}, a u32 part number
 * 1, 2, 3..., then payload bytes).
 */
public final class Parts {
    private Parts() {}

    /** Bytes before a continuation part's payload: magic and part number. */
    public static final int PART_HEADER = 8;

    /**
     * Splits a whole binary message into parts of at most {@code maxPartBytes} bytes each (the
     * first part is longer only if the headers alone are: it must hold all of them). A message
     * that fits, or has no payload to split, comes back whole. The parts are views of
     * {@code message} except the first, whose MORE flag is set in a copy of its header.
     */
    public static List<ByteBuffer> split(ByteBuffer message, int maxPartBytes) {
        if (maxPartBytes <= PART_HEADER) {
            throw new IllegalArgumentException("max part bytes must exceed " + PART_HEADER);
        }
        ByteBuffer b = message.slice().order(ByteOrder.LITTLE_ENDIAN);
        int total = b.remaining();
        int payloadOffset = b.getInt(12);
        int first = Math.max(maxPartBytes, payloadOffset);
        if (total <= maxPartBytes || first >= total) {
            return List.of(b);
        }
        List<ByteBuffer> parts = new ArrayList<>();
        ByteBuffer head = ByteBuffer.allocate(first).order(ByteOrder.LITTLE_ENDIAN);
        head.put(b.duplicate().limit(first)).putShort(6, (short) Codec.FLAG_MORE).clear();
        parts.add(head);
        int chunk = maxPartBytes - PART_HEADER;
        int number = 1;
        for (int pos = first; pos < total; pos += chunk, number++) {
            int n = Math.min(chunk, total - pos);
            ByteBuffer part = ByteBuffer.allocate(PART_HEADER + n).order(ByteOrder.LITTLE_ENDIAN);
            part.putInt(Codec.MAGIC_PART).putInt(number).put(b.duplicate().limit(pos + n).position(pos)).clear();
            parts.add(part);
        }
        return parts;
    }

    /**
     * Receives binary WebSocket messages and yields whole binary messages: a whole message
     * passes through, parts are joined. Checks framing (bad_frame), the first part's headers,
     * and the size limits before the rest arrives (message_too_big).
     */
    public static final class Reassembler {
        private final int version;
        private final Long maxMessageBytes;
        private final Long maxControlBytes;
        private ByteBuffer pending; // the message being joined, or null
        private int nextPart;

        /**
         * @param maxMessageBytes largest binary message, all parts together, or null for none
         * @param maxControlBytes largest JSON header, or null for none
         */
        public Reassembler(int version, Long maxMessageBytes, Long maxControlBytes) {
            this.version = version;
            this.maxMessageBytes = maxMessageBytes;
            this.maxControlBytes = maxControlBytes;
        }

        /** Whether a part set has begun and not completed. */
        public boolean inProgress() {
            return pending != null;
        }

        /**
         * Feeds one binary WebSocket message; returns the whole message once complete, else null.
         * The whole message still needs {@link Codec#decodeBinary}.
         */
        public ByteBuffer feed(ByteBuffer data) {
            try {
                ByteBuffer b = data.slice().order(ByteOrder.LITTLE_ENDIAN);
                return pending == null ? first(b) : continuation(b);
            } catch (ProtocolException e) {
                pending = null;
                throw e;
            } catch (RuntimeException e) {
                pending = null;
                throw new ProtocolException(Codes.INTERNAL_ERROR, "internal error", e);
            }
        }

        private ByteBuffer first(ByteBuffer b) {
            Codec.FrameHeader h = Codec.readFrameHeader(b, version);
            checkSize(h.total());
            if (h.flags() == 0) {
                return b; // a whole message; its length is checked by decodeBinary
            }
            if (h.flags() != Codec.FLAG_MORE) {
                throw new ProtocolException(Codes.BAD_FRAME, "unknown flags " + h.flags());
            }
            if (b.remaining() < h.payloadOffset() || b.remaining() >= h.total()) {
                throw new ProtocolException(Codes.BAD_FRAME,
                        "a first part must hold the headers and less than the whole message");
            }
            Codec.checkFirstPart(b, h, maxControlBytes);
            if (h.total() > Integer.MAX_VALUE - 8) {
                throw new ProtocolException(Codes.MESSAGE_TOO_BIG, "a message of " + h.total() + " bytes");
            }
            pending = ByteBuffer.allocate((int) h.total()).order(ByteOrder.LITTLE_ENDIAN);
            pending.put(b).putShort(6, (short) 0); // the joined message is a whole one: flags 0
            nextPart = 1;
            return null;
        }

        private ByteBuffer continuation(ByteBuffer b) {
            if (b.remaining() < 4 || b.getInt(0) != Codec.MAGIC_PART) {
                throw new ProtocolException(Codes.BAD_FRAME, "another binary message inside a part set");
            }
            if (b.remaining() <= PART_HEADER) {
                throw new ProtocolException(Codes.BAD_FRAME, "a continuation part without payload bytes");
            }
            long number = b.getInt(4) & 0xffffffffL;
            if (number != nextPart) {
                throw new ProtocolException(Codes.BAD_FRAME, "part " + number + " where part " + nextPart + " was due");
            }
            int n = b.remaining() - PART_HEADER;
            if (n > pending.remaining()) {
                throw new ProtocolException(Codes.BAD_FRAME, "part " + number + " runs past payload_len");
            }
            pending.put(b.position(PART_HEADER));
            nextPart++;
            if (pending.hasRemaining()) {
                return null;
            }
            ByteBuffer whole = pending;
            pending = null;
            return whole.clear();
        }

        private void checkSize(long total) {
            if (maxMessageBytes != null && total > maxMessageBytes) {
                throw new ProtocolException(Codes.MESSAGE_TOO_BIG,
                        "a binary message of " + total + " bytes, the limit is " + maxMessageBytes);
            }
        }
    }
}
