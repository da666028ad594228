package org.mjfl.client.protocol;

import java.nio.ByteBuffer;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;

/** Artifact names (section 6): sha256 as 64 lowercase hex digits. */
public final class Sha256 {
    private Sha256() {}

    /** The sha256 of the buffers' remaining bytes, one after the other (a shard is x then y). */
    public static String of(ByteBuffer... parts) {
        MessageDigest md = digest();
        for (ByteBuffer p : parts) {
            md.update(p.duplicate());
        }
        return hex(md.digest());
    }

    public static String of(byte[] bytes) {
        return of(ByteBuffer.wrap(bytes));
    }

    public static MessageDigest digest() {
        try {
            return MessageDigest.getInstance("SHA-256");
        } catch (NoSuchAlgorithmException e) {
            throw new AssertionError("every Java platform has SHA-256", e);
        }
    }

    public static String hex(byte[] digest) {
        StringBuilder sb = new StringBuilder(digest.length * 2);
        for (byte b : digest) {
            sb.append(Character.forDigit((b >> 4) & 15, 16)).append(Character.forDigit(b & 15, 16));
        }
        return sb.toString();
    }
}
