package org.mjfl.client.protocol;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonObject;
import java.nio.charset.StandardCharsets;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.mjfl.client.session.DeviceSession;

class CredentialsTest {
    static final String NONCE = "00".repeat(31) + "01";
    static final String SECRET = "s3cret-s3cret-s3cret";
    // protocol.md 5.1.1's known answer, also checked by the Python reference's tests.
    static final String PROOF = "d3f94a1300cb54806716dd6103e77e010a7729c3af240946905116f692946711";

    @Test
    void theProofIsTheDocumentedHmac() {
        assertEquals("mjfl-hello-proof-v1\0" + NONCE + "\0pixel7-01",
                new String(Credentials.message(NONCE, "pixel7-01"), StandardCharsets.UTF_8));
        assertEquals(PROOF, Credentials.helloProof(SECRET, NONCE, "pixel7-01"));
    }

    @Test
    void theCheckRefusesAnotherSecretNonceOrDevice() {
        assertTrue(Credentials.proofMatches(SECRET, NONCE, "pixel7-01", PROOF));
        assertFalse(Credentials.proofMatches(SECRET + "x", NONCE, "pixel7-01", PROOF));
        assertFalse(Credentials.proofMatches(SECRET, "00".repeat(32), "pixel7-01", PROOF)); // a replay: new nonce
        assertFalse(Credentials.proofMatches(SECRET, NONCE, "pixel7-02", PROOF));
        assertFalse(Credentials.proofMatches(SECRET, NONCE, "pixel7-01", PROOF.substring(1)));
    }

    private static Message.Hello hello() {
        return new Message.Hello("pixel7-01", "", "executorch", List.of(1), new JsonObject(), List.of(), null);
    }

    @Test
    void theSessionProvesItsSecretOverTheHandshakeNonce() throws Exception {
        DeviceSession s = new DeviceSession(hello(), null, SECRET);
        s.connect(NONCE);
        String sent = s.dataToSend().get(0).text();
        Message.Hello h = (Message.Hello) Codec.decodeText(sent);
        assertEquals(PROOF, h.proof());
        assertTrue(sent.endsWith(",\"proof\":\"" + PROOF + "\"}"), sent);
    }

    @Test
    void withoutSecretOrNonceTheHelloCarriesNoProof() throws Exception {
        DeviceSession open = new DeviceSession(hello(), null);
        open.connect(NONCE);
        assertNull(((Message.Hello) Codec.decodeText(open.dataToSend().get(0).text())).proof());
        DeviceSession noNonce = new DeviceSession(hello(), null, SECRET);
        noNonce.connect(null); // an old coordinator: no MJFL-Nonce header
        assertNull(((Message.Hello) Codec.decodeText(noNonce.dataToSend().get(0).text())).proof());
    }

    @Test
    void aMalformedProofIsABadMessage() {
        String bad = "{\"type\":\"hello\",\"device_id\":\"d\",\"token\":\"\",\"runtime\":\"torch\",\"versions\":[1],"
                + "\"hardware\":{},\"cached\":[],\"max_message_bytes\":null,\"proof\":\"ABC\"}";
        ProtocolException e = assertThrows(ProtocolException.class, () -> Codec.decodeText(bad));
        assertEquals(Codes.BAD_MESSAGE, e.code());
    }
}
