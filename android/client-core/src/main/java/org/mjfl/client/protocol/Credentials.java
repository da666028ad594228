package org.mjfl.client.protocol;

import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.util.regex.Pattern;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

/**
 * The hello's proof of an enrolled device's secret (protocol.md section 5.1.1): lowercase hex of
 * HMAC-SHA256, keyed with the secret's UTF-8 bytes, over {@code "mjfl-hello-proof-v1" NUL nonce
 * NUL device_id}. The nonce is the coordinator's, fresh for each connection, from the handshake
 * response header {@value #NONCE_HEADER}.
 */
public final class Credentials {
    private Credentials() {}

    public static final String NONCE_HEADER = "MJFL-Nonce";
    static final String LABEL = "mjfl-hello-proof-v1";
    private static final Pattern NONCE = Pattern.compile("[0-9a-f]{64}");

    /** Whether {@code nonce} is 64 lowercase hex digits. */
    public static boolean isNonce(String nonce) {
        return nonce != null && NONCE.matcher(nonce).matches();
    }

    /** The bytes the MAC covers. */
    public static byte[] message(String nonce, String deviceId) {
        return (LABEL + "\0" + nonce + "\0" + deviceId).getBytes(StandardCharsets.UTF_8);
    }

    /** The hello's {@code proof} of {@code secret} for {@code nonce}. */
    public static String helloProof(String secret, String nonce, String deviceId) {
        try {
            Mac mac = Mac.getInstance("HmacSHA256");
            mac.init(new SecretKeySpec(secret.getBytes(StandardCharsets.UTF_8), "HmacSHA256"));
            return Sha256.hex(mac.doFinal(message(nonce, deviceId)));
        } catch (GeneralSecurityException e) {
            throw new AssertionError("every Java platform has HmacSHA256", e);
        }
    }

    /** Whether {@code proof} is the right one, compared in constant time (the coordinator's check). */
    public static boolean proofMatches(String secret, String nonce, String deviceId, String proof) {
        byte[] expected = helloProof(secret, nonce, deviceId).getBytes(StandardCharsets.UTF_8);
        return MessageDigest.isEqual(expected, proof.getBytes(StandardCharsets.UTF_8));
    }
}
