package org.mjfl.client.protocol;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.Gson;
import com.google.gson.JsonArray;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.Set;
import java.util.function.Consumer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.function.Executable;

/** Text and binary messages: round trips, and every refusal with its section 8 code. */
class CodecTest {
    static final String SHA_A = "a".repeat(64);
    static final String SHA_B = "b".repeat(64);

    static ProtocolException refused(String code, Executable e) {
        ProtocolException x = assertThrows(ProtocolException.class, e);
        assertEquals(code, x.code(), x.reason());
        return x;
    }

    static void text(String code, String json) {
        refused(code, () -> Codec.decodeText(json));
    }

    static void bin(String code, byte[] message) {
        refused(code, () -> Codec.decodeBinary(ByteBuffer.wrap(message), 1, 65536L));
    }

    static JsonObject json(String s) {
        return JsonParser.parseString(s).getAsJsonObject();
    }

    // ----------------------------------------------------------------------------------------
    // Round trips

    static List<Message> textMessages() {
        JsonObject hw = json("{\"model\":\"Pixel \u00e9\",\"cores\":8,\"nested\":{\"x\":[1.5,true,null]}}");
        return List.of(
                new Message.Hello("d-\u00e9\ud83d\ude00", "", "torch", List.of(1, 2, 65535), hw, List.of(SHA_A, SHA_B), null),
                new Message.Welcome(1, "c", new Message.Settings(null, 0.25, null, 1L)),
                new Message.Cancel("t", ""),
                new Message.Heartbeat(Long.MAX_VALUE, -1.5e-300),
                new Message.HeartbeatAck(1, 1e300),
                new Message.ErrorMessage("busy", "r".repeat(1024), null),
                new Message.ErrorMessage("task_failed", "x", "t".repeat(256)),
                new Message.Bye("z" + "9".repeat(63), "\u00e9\n\""));
    }

    @Test
    void textMessagesRoundTrip() {
        for (Message m : textMessages()) {
            String s = Codec.encodeText(m);
            assertTrue(s.chars().allMatch(c -> c >= 0x20 && c <= 0x7e), "ASCII only: " + s);
            Message back = Codec.decodeText(s);
            assertEquals(s, Codec.encodeText(back));
            if (!(m instanceof Message.Hello)) {
                assertEquals(m, back); // records; Hello holds a JsonObject whose numbers change class
            }
        }
    }

    static Message.Task task(List<Tensor> tensors) {
        return new Message.Task("t-1", "job", 3, 2, 8, 0.05, 0.9, 0.0, null, SHA_A, SHA_B, tensors);
    }

    static List<Tensor> everyDtype() {
        Random rng = new Random(1);
        List<Tensor> ts = new ArrayList<>();
        for (DType d : DType.values()) {
            byte[] raw = new byte[d.itemSize() * 6];
            rng.nextBytes(raw);
            if (d == DType.FLOAT16) {
                ByteBuffer b = ByteBuffer.wrap(raw).order(ByteOrder.LITTLE_ENDIAN);
                for (int i = 0; i < 6; i++) {
                    b.putShort(i * 2, Half.fromFloat(rng.nextFloat()));
                }
            } else if (d == DType.FLOAT32) {
                raw = Frames.f32(1, -2, 3.5f, 0, 1e-30f, 7);
            } else if (d == DType.FLOAT64) {
                ByteBuffer b = ByteBuffer.wrap(raw).order(ByteOrder.LITTLE_ENDIAN);
                for (int i = 0; i < 6; i++) {
                    b.putDouble(i * 8, rng.nextGaussian());
                }
            }
            ts.add(Tensor.ofBytes("w." + d.wireName(), d, new long[] {2, 3}, raw));
        }
        ts.add(Tensor.ofFloats("scalar", new long[] {}, new float[] {42}));
        ts.add(Tensor.ofFloats("empty", new long[] {0, 5}, new float[0]));
        ts.add(Tensor.ofFloats("after.empty", new long[] {1}, new float[] {1}));
        return ts;
    }

    @Test
    void binaryMessagesRoundTripWithTensorsViewedInPlace() {
        List<Tensor> ts = everyDtype();
        Message.Result r = new Message.Result("t-1", "job", 3, 20, 0.25, new Message.Timing(0, 1.5, null), null, ts);
        for (Message.Binary m : List.of(task(ts), r,
                new Message.Provision("job", new Message.ModelSpec("m", List.of(1L, 2L), 3), SHA_A, SHA_B, List.of()))) {
            ByteBuffer bytes = Codec.encodeBinary(m, 1);
            assertEquals(0, Codec.align64(bytes.getInt(12)) - bytes.getInt(12), "payload 64-aligned");
            Message.Binary back = Codec.decodeBinary(bytes, 1, null);
            assertEquals(m.type(), back.type());
            assertArrayEquals(Frames.bytes(bytes), Frames.bytes(Codec.encodeBinary(back, 1)));
            for (int i = 0; i < m.tensors().size(); i++) {
                assertTrue(m.tensors().get(i).sameSpec(back.tensors().get(i)));
                assertEquals(m.tensors().get(i).data(), back.tensors().get(i).data(), "values");
            }
        }
        // In place: a decoded tensor is a read-only view of the message, not a copy.
        byte[] raw = Frames.bytes(Codec.encodeBinary(task(List.of(Tensor.ofFloats("w", new long[] {2}, new float[] {1, 2}))), 1));
        Message.Task t = (Message.Task) Codec.decodeBinary(ByteBuffer.wrap(raw), 1, null);
        assertTrue(t.tensors().get(0).data().isReadOnly());
        int at = ByteBuffer.wrap(raw).order(ByteOrder.LITTLE_ENDIAN).getInt(12);
        ByteBuffer.wrap(raw).order(ByteOrder.LITTLE_ENDIAN).putFloat(at, 9f);
        assertEquals(9f, t.tensors().get(0).toFloats()[0]);
    }

    @Test
    void canonicalLayoutAlignsEveryTensorAndZeroPads() {
        ByteBuffer b = Codec.encodeBinary(task(everyDtype()), 1).order(ByteOrder.LITTLE_ENDIAN);
        int headerLen = b.getInt(8);
        int payloadOffset = b.getInt(12);
        for (int i = 24 + headerLen; i < payloadOffset; i++) {
            assertEquals(0, b.get(i), "header padding at " + i);
        }
        JsonObject h = json(new String(Frames.bytes(b.duplicate().position(24).limit(24 + headerLen)), StandardCharsets.UTF_8));
        long expected = 0;
        for (var e : h.getAsJsonArray("tensors")) {
            long off = e.getAsJsonObject().get("offset").getAsLong();
            assertEquals(expected, off);
            long end = off + e.getAsJsonObject().get("nbytes").getAsLong();
            expected = Codec.align64(end);
            for (long k = end; k < expected && payloadOffset + k < b.limit(); k++) {
                assertEquals(0, b.get((int) (payloadOffset + k)), "tensor padding");
            }
        }
    }

    @Test
    void resultExtrasAreWrittenAfterTimingAndIgnoredByReaders() {
        Message.Result r = new Message.Result("t", "j", 0, 1, 0, new Message.Timing(0, 0, null),
                json("{\"battery\":{\"level\":0.5,\"charging\":false}}"), List.of());
        ByteBuffer b = Codec.encodeBinary(r, 1).order(ByteOrder.LITTLE_ENDIAN);
        String header = new String(Frames.bytes(b.duplicate().position(24).limit(24 + b.getInt(8))), StandardCharsets.US_ASCII);
        assertTrue(header.contains("\"upload_s\":null},\"battery\":{\"level\":0.5,\"charging\":false},\"tensors\":[]"), header);
        assertEquals(new Message.Result("t", "j", 0, 1, 0, new Message.Timing(0, 0, null), null, List.of()),
                Codec.decodeBinary(b, 1, null));
    }

    @Test
    void unknownFieldsAreIgnored() {
        Message m = Codec.decodeText("{\"later\":{\"x\":1},\"type\":\"cancel\",\"reason\":\"r\",\"task_id\":\"t\",\"v2\":[]}");
        assertEquals(new Message.Cancel("t", "r"), m);
        byte[] b = Frames.binary("{\"type\":\"provision\",\"job_id\":\"j\",\"extra\":1,\"model\":{\"name\":\"m\","
                + "\"input_shape\":[1],\"num_classes\":2,\"more\":true},\"program_sha256\":\"" + SHA_A
                + "\",\"shard_sha256\":\"" + SHA_B + "\",\"tensors\":[]}", new byte[0]);
        assertEquals("j", ((Message.Provision) Codec.decodeBinary(ByteBuffer.wrap(b), 1, null)).jobId());
    }

    @Test
    void optionalFieldsMayBeAbsent() {
        Message.ErrorMessage e = (Message.ErrorMessage) Codec.decodeText("{\"type\":\"error\",\"code\":\"busy\",\"reason\":\"\"}");
        assertNull(e.taskId());
        Message.Welcome w = (Message.Welcome) Codec.decodeText("{\"type\":\"welcome\",\"version\":1,\"coordinator_id\":\"c\",\"settings\":{}}");
        assertEquals(new Message.Settings(null, null, null, null), w.settings());
        Message.Hello h = (Message.Hello) Codec.decodeText("{\"type\":\"hello\",\"device_id\":\"d\",\"token\":\"\","
                + "\"runtime\":\"executorch\",\"versions\":[1],\"hardware\":{},\"cached\":[]}");
        assertNull(h.maxMessageBytes());
    }

    // ----------------------------------------------------------------------------------------
    // Text refusals

    /** Every listed field of every golden text message, removed in turn: bad_message. */
    @Test
    void everyMissingFieldIsBadMessage() throws Exception {
        Set<String> optional = Set.of("hello.max_message_bytes", "error.task_id");
        int checked = 0;
        for (String f : List.of("hello", "welcome", "cancel", "heartbeat", "heartbeat_ack", "error", "bye")) {
            JsonObject o = json(Files.readString(Frames.goldenDir().resolve(f + ".txt")));
            for (String k : o.keySet()) {
                if (k.equals("type") || optional.contains(f + "." + k)) {
                    continue;
                }
                JsonObject copy = o.deepCopy();
                copy.remove(k);
                text(Codes.BAD_MESSAGE, copy.toString());
                checked++;
            }
        }
        assertTrue(checked >= 17);
    }

    @Test
    void typeRules() {
        text(Codes.BAD_MESSAGE, "{\"seq\":1}");
        text(Codes.BAD_MESSAGE, "{\"type\":1}");
        text(Codes.UNKNOWN_TYPE, "{\"type\":\"gossip\"}");
        text(Codes.BAD_MESSAGE, "{\"type\":\"task\"}");
        text(Codes.BAD_MESSAGE, "{\"type\":\"provision\"}");
    }

    @Test
    void intAndNumberRules() {
        String hb = "{\"type\":\"heartbeat\",\"seq\":%s,\"sent_at\":%s}";
        for (String badSeq : List.of("1.0", "1e0", "-1", "0", "9223372036854775808", "true", "\"1\"", "null", "[1]")) {
            text(Codes.BAD_MESSAGE, String.format(hb, badSeq, "1"));
        }
        for (String badNum : List.of("1e400", "-1e400", "true", "\"1\"", "null")) {
            text(Codes.BAD_MESSAGE, String.format(hb, "1", badNum));
        }
        assertEquals(new Message.Heartbeat(Long.MAX_VALUE, 2.0), Codec.decodeText(String.format(hb, "9223372036854775807", "2")));
        assertEquals(0.0, ((Message.Heartbeat) Codec.decodeText(String.format(hb, "1", "-0"))).sentAt(), 0.0);
    }

    @Test
    void idCodeReasonAndShaLimits() {
        String cancel = "{\"type\":\"cancel\",\"task_id\":%s,\"reason\":%s}";
        text(Codes.BAD_MESSAGE, String.format(cancel, "\"\"", "\"\""));
        text(Codes.BAD_MESSAGE, String.format(cancel, "\"" + "t".repeat(257) + "\"", "\"\""));
        text(Codes.BAD_MESSAGE, String.format(cancel, "\"t\"", "\"" + "r".repeat(1025) + "\""));
        text(Codes.BAD_MESSAGE, String.format(cancel, "7", "\"\""));
        Codec.decodeText(String.format(cancel, "\"" + "\ud83d\ude00".repeat(256) + "\"", "\"" + "r".repeat(1024) + "\""));
        for (String code : List.of("Bad", "1abc", "_a", "a-b", "", "a" + "b".repeat(64))) {
            text(Codes.BAD_MESSAGE, "{\"type\":\"bye\",\"code\":\"" + code + "\",\"reason\":\"\"}");
        }
        String hello = "{\"type\":\"hello\",\"device_id\":\"d\",\"token\":\"\",\"runtime\":\"executorch\",\"versions\":[1],"
                + "\"hardware\":{},\"cached\":[\"%s\"]}";
        text(Codes.BAD_MESSAGE, String.format(hello, "A".repeat(64)));
        text(Codes.BAD_MESSAGE, String.format(hello, "a".repeat(63)));
    }

    @Test
    void helloAndWelcomeRules() {
        String hello = "{\"type\":\"hello\",\"device_id\":\"d\",\"token\":%s,\"runtime\":%s,\"versions\":%s,"
                + "\"hardware\":%s,\"cached\":%s,\"max_message_bytes\":%s}";
        String[] ok = {"\"\"", "\"executorch\"", "[1]", "{}", "[]", "null"};
        Codec.decodeText(String.format(hello, (Object[]) ok));
        String[][] bad = {
            {"\"" + "k".repeat(4097) + "\""}, {null, "\"onnx\""}, {null, null, "[]"}, {null, null, "[0]"},
            {null, null, "[65536]"}, {null, null, new JsonArray(65).toString().replace("[]", "[" + "1,".repeat(64) + "1]")},
            {null, null, null, "[]"}, {null, null, null, null, "\"x\""}, {null, null, null, null, null, "0"},
        };
        for (String[] b : bad) {
            String[] v = ok.clone();
            for (int i = 0; i < b.length; i++) {
                if (b[i] != null) {
                    v[i] = b[i];
                }
            }
            text(Codes.BAD_MESSAGE, String.format(hello, (Object[]) v));
        }
        StringBuilder many = new StringBuilder("[");
        for (int i = 0; i < 4097; i++) {
            many.append(i == 0 ? "" : ",").append('"').append(SHA_A).append('"');
        }
        text(Codes.BAD_MESSAGE, String.format(hello, ok[0], ok[1], ok[2], ok[3], many + "]", ok[5]));

        String welcome = "{\"type\":\"welcome\",\"version\":%s,\"coordinator_id\":\"c\",\"settings\":%s}";
        text(Codes.BAD_MESSAGE, String.format(welcome, "0", "{}"));
        text(Codes.BAD_MESSAGE, String.format(welcome, "65536", "{}"));
        text(Codes.BAD_MESSAGE, String.format(welcome, "1", "null"));
        for (String s : List.of("{\"heartbeat_interval_s\":0}", "{\"heartbeat_timeout_s\":-1}",
                "{\"max_message_bytes\":0}", "{\"max_control_bytes\":1.5}")) {
            text(Codes.BAD_MESSAGE, String.format(welcome, "1", s));
        }
    }

    // ----------------------------------------------------------------------------------------
    // Binary refusals

    static final String RESULT = "{\"type\":\"result\",\"task_id\":\"t\",\"job_id\":\"j\",\"round\":1,\"samples\":2,"
            + "\"mean_loss\":0.5,\"timing\":{\"download_s\":0.0,\"compute_s\":1.0,\"upload_s\":null},\"tensors\":%s}";

    static byte[] result(String tensors, byte[] payload) {
        return Frames.binary(String.format(RESULT, tensors), payload);
    }

    static final String ONE = "[{\"name\":\"w\",\"dtype\":\"float32\",\"shape\":[2],\"offset\":0,\"nbytes\":8}]";

    @Test
    void fixedHeaderRules() {
        byte[] good = result(ONE, Frames.f32(1, 2));
        Codec.decodeBinary(ByteBuffer.wrap(good), 1, null);
        bin(Codes.BAD_FRAME, new byte[23]);
        bin(Codes.BAD_FRAME, patch(good, b -> b.put(0, (byte) 'X')));
        bin(Codes.BAD_FRAME, patch(good, b -> b.putInt(0, Codec.MAGIC_PART)));
        bin(Codes.BAD_FRAME, patch(good, b -> b.putShort(4, (short) 2)));
        bin(Codes.BAD_FRAME, patch(good, b -> b.putShort(6, (short) 1)), "MORE on a whole message");
        bin(Codes.BAD_FRAME, patch(good, b -> b.putShort(6, (short) 4)));
        bin(Codes.BAD_FRAME, patch(good, b -> b.putInt(12, b.getInt(12) + 64)));
        bin(Codes.BAD_FRAME, patch(good, b -> b.putInt(8, b.getInt(8) + 64)), "header_len inconsistent with payload_offset");
        bin(Codes.BAD_FRAME, patch(good, b -> b.putLong(16, -8)));
        bin(Codes.BAD_FRAME, patch(good, b -> b.putLong(16, 16)));
        bin(Codes.BAD_FRAME, java.util.Arrays.copyOf(good, good.length + 1));
        bin(Codes.BAD_FRAME, java.util.Arrays.copyOf(good, good.length - 1));
        refused(Codes.BAD_FRAME, () -> Codec.decodeBinary(ByteBuffer.wrap(good), 2, null));
        refused(Codes.MESSAGE_TOO_BIG, () -> Codec.decodeBinary(ByteBuffer.wrap(good), 1, 100L));
    }

    private static void bin(String code, byte[] message, String why) {
        ProtocolException x = assertThrows(ProtocolException.class, () -> Codec.decodeBinary(ByteBuffer.wrap(message), 1, 65536L), why);
        assertEquals(code, x.code(), why + ": " + x.reason());
    }

    static byte[] patch(byte[] b, Consumer<ByteBuffer> f) {
        byte[] c = b.clone();
        f.accept(ByteBuffer.wrap(c).order(ByteOrder.LITTLE_ENDIAN));
        return c;
    }

    @Test
    void jsonHeaderRules() {
        byte[] notUtf8 = Frames.binary("{\"type\":\"result\"}", new byte[0]);
        notUtf8[25] = (byte) 0xff;
        bin(Codes.BAD_MESSAGE, notUtf8);
        bin(Codes.BAD_MESSAGE, Frames.binary("{\"type\":\"result\"", new byte[0]));
        bin(Codes.BAD_MESSAGE, Frames.binary("{\"type\":\"heartbeat\",\"seq\":1,\"sent_at\":0.0,\"tensors\":[]}", new byte[0]));
        bin(Codes.UNKNOWN_TYPE, Frames.binary("{\"type\":\"gossip\",\"tensors\":[]}", new byte[0]));
        bin(Codes.BAD_MESSAGE, result(ONE, Frames.f32(1, 2)).length > 0
                ? Frames.binary(String.format(RESULT, ONE).replace("\"samples\":2", "\"samples\":-1"), Frames.f32(1, 2))
                : null);
        bin(Codes.BAD_MESSAGE, Frames.binary(String.format(RESULT, ONE).replace("\"download_s\":0.0", "\"download_s\":-0.5"), Frames.f32(1, 2)));
        bin(Codes.BAD_TENSOR_TABLE, Frames.binary(String.format(RESULT, ONE).replace(",\"tensors\":" + ONE, ""), Frames.f32(1, 2)));
    }

    @Test
    void tensorTableRules() {
        String e = "{\"name\":%s,\"dtype\":%s,\"shape\":%s,\"offset\":%s,\"nbytes\":%s}";
        byte[] p8 = Frames.f32(1, 2);
        bin(Codes.BAD_TENSOR_TABLE, result("{}", p8));
        bin(Codes.BAD_TENSOR_TABLE, result("[1]", p8));
        bin(Codes.BAD_TENSOR_TABLE, result("[" + String.format(e, "\"\"", "\"float32\"", "[2]", "0", "8") + "]", p8));
        bin(Codes.BAD_TENSOR_TABLE, result("[" + String.format(e, "\"" + "n".repeat(1025) + "\"", "\"float32\"", "[2]", "0", "8") + "]", p8));
        bin(Codes.BAD_TENSOR_TABLE, result("[" + String.format(e, "\"w\"", "\"bfloat16\"", "[2]", "0", "8") + "]", p8));
        bin(Codes.BAD_TENSOR_TABLE, result("[" + String.format(e, "\"w\"", "\"float32\"", "[-2]", "0", "8") + "]", p8));
        bin(Codes.BAD_TENSOR_TABLE, result("[" + String.format(e, "\"w\"", "\"float32\"", "[2.0]", "0", "8") + "]", p8));
        bin(Codes.BAD_TENSOR_TABLE, result("[" + String.format(e, "\"w\"", "\"float32\"", "[" + "1,".repeat(32) + "2]", "0", "8") + "]", p8));
        bin(Codes.BAD_TENSOR_TABLE, result("[" + String.format(e, "\"w\"", "\"float32\"", "[2]", "0", "4") + "]", p8));
        bin(Codes.BAD_TENSOR_TABLE, result("[" + String.format(e, "\"w\"", "\"float32\"", "[2]", "8", "8") + "]", new byte[16]));
        bin(Codes.BAD_TENSOR_TABLE, result("[" + String.format(e, "\"w\"", "\"float32\"", "[2]", "0", "8") + "]", new byte[12]));
        bin(Codes.BAD_TENSOR_TABLE, result("[" + String.format(e, "\"w\"", "\"float32\"", "[4]", "0", "16") + "]", p8));
        bin(Codes.BAD_TENSOR_TABLE, result("[" + String.format(e, "\"w\"", "\"float32\"", "[9223372036854775807,2]", "0", "8") + "]", p8));
        bin(Codes.BAD_TENSOR_TABLE, result("[]", p8));
        String two = String.format(e, "\"w\"", "\"float32\"", "[2]", "0", "8") + "," + String.format(e, "\"w\"", "\"float32\"", "[2]", "64", "8");
        bin(Codes.BAD_TENSOR_TABLE, result("[" + two + "]", new byte[72]));
        String notAligned = String.format(e, "\"w\"", "\"float32\"", "[2]", "0", "8") + "," + String.format(e, "\"v\"", "\"float32\"", "[2]", "8", "8");
        bin(Codes.BAD_TENSOR_TABLE, result("[" + notAligned + "]", new byte[16]));
        // Zero-sized tensors sit at the aligned end of the previous one; a table may be empty.
        String empty = String.format(e, "\"w\"", "\"float32\"", "[2]", "0", "8") + "," + String.format(e, "\"z\"", "\"float32\"", "[0]", "64", "0");
        Codec.decodeBinary(ByteBuffer.wrap(result("[" + empty + "]", new byte[64])), 1, null);
        Codec.decodeBinary(ByteBuffer.wrap(result("[]", new byte[0])), 1, null);
    }

    @Test
    void provisionRules() {
        String head = "{\"type\":\"provision\",\"job_id\":\"j\",\"model\":{\"name\":\"m\",\"input_shape\":%s,\"num_classes\":2},"
                + "\"program_sha256\":\"" + SHA_A + "\",\"shard_sha256\":\"" + SHA_B + "\",\"tensors\":%s}";
        String x = "{\"name\":\"x\",\"dtype\":\"float32\",\"shape\":%s,\"offset\":0,\"nbytes\":16}";
        String y = "{\"name\":\"y\",\"dtype\":\"%s\",\"shape\":[2],\"offset\":64,\"nbytes\":16}";
        byte[] p = new byte[80];
        Codec.decodeBinary(ByteBuffer.wrap(Frames.binary(String.format(head, "[2]", "[" + String.format(x, "[2,2]") + "," + String.format(y, "int64") + "]"), p)), 1, null);
        bin(Codes.BAD_MESSAGE, Frames.binary(String.format(head, "[2]", "[" + String.format(x, "[2,2]") + "]"), new byte[16]));
        bin(Codes.BAD_MESSAGE, Frames.binary(String.format(head, "[1,2]", "[" + String.format(x, "[2,2]") + "," + String.format(y, "int64") + "]"), p));
        bin(Codes.BAD_MESSAGE, Frames.binary(String.format(head, "[2]", "[" + String.format(x, "[4,1]") + "," + String.format(y, "int64") + "]"), p));
        bin(Codes.BAD_MESSAGE, Frames.binary(String.format(head, "[2]", "[" + String.format(x, "[2,2]") + "," + String.format(y, "float64") + "]"), p));
        bin(Codes.BAD_MESSAGE, Frames.binary(String.format(head, "[2]", "[{\"name\":\"z\",\"dtype\":\"uint8\",\"shape\":[1],\"offset\":0,\"nbytes\":1}]"), new byte[1]));
        bin(Codes.BAD_MESSAGE, Frames.binary(String.format(head, "[2]", "[{\"name\":\"program\",\"dtype\":\"int8\",\"shape\":[1],\"offset\":0,\"nbytes\":1}]"), new byte[1]));
        bin(Codes.BAD_MESSAGE, Frames.binary(String.format(head, "[]", "[]"), new byte[0]));
        bin(Codes.BAD_MESSAGE, Frames.binary(String.format(head, "[0]", "[]"), new byte[0]));
        bin(Codes.BAD_MESSAGE, Frames.binary(String.format(head, "[1,1,1,1,1,1,1,1,1]", "[]"), new byte[0]));
    }

    @Test
    void taskRules() {
        String t = "{\"type\":\"task\",\"task_id\":\"t\",\"job_id\":\"j\",\"round\":0,\"epochs\":%s,\"batch_size\":1,\"lr\":%s,"
                + "\"momentum\":0,\"weight_decay\":0,\"deadline_s\":%s,\"program_sha256\":\"" + SHA_A + "\",\"shard_sha256\":\""
                + SHA_B + "\",\"tensors\":[]}";
        Message.Task ok = (Message.Task) Codec.decodeBinary(ByteBuffer.wrap(Frames.binary(String.format(t, "1", "0", "null"), new byte[0])), 1, null);
        assertNull(ok.deadlineS());
        bin(Codes.BAD_MESSAGE, Frames.binary(String.format(t, "0", "0", "null"), new byte[0]));
        bin(Codes.BAD_MESSAGE, Frames.binary(String.format(t, "1", "-0.1", "null"), new byte[0]));
        bin(Codes.BAD_MESSAGE, Frames.binary(String.format(t, "1", "0", "0"), new byte[0]));
    }

    @Test
    void aTaskCarriesAnOptionalSeedOfSixtyThreeBits() {
        String t = "{\"type\":\"task\",\"task_id\":\"t\",\"job_id\":\"j\",\"round\":0,\"epochs\":1,\"batch_size\":1,\"lr\":0,"
                + "\"momentum\":0,\"weight_decay\":0,\"deadline_s\":null,\"program_sha256\":\"" + SHA_A + "\",\"shard_sha256\":\""
                + SHA_B + "\"%s,\"tensors\":[]}";
        for (String seed : new String[] {"0", "20261127", "9223372036854775807"}) {
            Message.Task m = decodeTask(String.format(t, ",\"seed\":" + seed));
            assertEquals(Long.valueOf(seed), m.seed());
            // Written back after shard_sha256, as the Python coordinator writes it.
            Message.Task again = (Message.Task) Codec.decodeBinary(Codec.encodeBinary(m, 1), 1, null);
            assertEquals(m, again);
        }
        assertNull(decodeTask(String.format(t, "")).seed(), "an older coordinator sends none");
        assertNull(decodeTask(String.format(t, ",\"seed\":null")).seed());
        String header = new String(Frames.bytes(Codec.encodeBinary(task(List.of()), 1)), StandardCharsets.US_ASCII);
        assertFalse(header.contains("seed"), "a task without a seed is written without the field");
        for (String bad : new String[] {"-1", "9223372036854775808", "1.5", "1e3", "\"7\"", "true"}) {
            ProtocolException x = assertThrows(ProtocolException.class,
                    () -> decodeTask(String.format(t, ",\"seed\":" + bad)), bad);
            assertEquals(Codes.BAD_MESSAGE, x.code(), bad);
            assertTrue(x.reason().contains("seed"), x.reason());
        }
        refused(Codes.BAD_MESSAGE, () -> Codec.encodeBinary(new Message.Task("t", "j", 0, 1, 1, 0, 0, 0, null, SHA_A,
                SHA_B, -1L, List.of()), 1));
    }

    private static Message.Task decodeTask(String header) {
        return (Message.Task) Codec.decodeBinary(ByteBuffer.wrap(Frames.binary(header, new byte[0])), 1, null);
    }

    // ----------------------------------------------------------------------------------------
    // Encoding refuses what the receiver would refuse

    @Test
    void encodingRefusesWhatAReceiverWould() {
        JsonObject hw = new JsonObject();
        refused(Codes.BAD_MESSAGE, () -> Codec.encodeText(new Message.Hello("", "", "executorch", List.of(1), hw, List.of(), null)));
        refused(Codes.BAD_MESSAGE, () -> Codec.encodeText(new Message.Hello("d", "", "executorch", List.of(), hw, List.of(), null)));
        refused(Codes.BAD_MESSAGE, () -> Codec.encodeText(new Message.Hello("d", "", "jvm", List.of(1), hw, List.of(), null)));
        JsonObject nan = new JsonObject();
        nan.addProperty("t", Double.NaN);
        refused(Codes.BAD_MESSAGE, () -> Codec.encodeText(new Message.Hello("d", "", "torch", List.of(1), nan, List.of(), null)));
        refused(Codes.BAD_MESSAGE, () -> Codec.encodeText(new Message.Bye("Bad", "")));
        refused(Codes.BAD_MESSAGE, () -> Codec.encodeText(new Message.Heartbeat(0, 1)));
        refused(Codes.BAD_MESSAGE, () -> Codec.encodeText(new Message.Heartbeat(1, Double.POSITIVE_INFINITY)));
        refused(Codes.BAD_MESSAGE, () -> Codec.encodeText(new Message.ErrorMessage("x", "r".repeat(1025), null)));
        refused(Codes.BAD_MESSAGE, () -> Codec.encodeText(new Message.Cancel("t", "\ud800")));

        Tensor w = Tensor.ofFloats("w", new long[] {2}, new float[] {1, Float.NaN});
        refused(Codes.BAD_WEIGHTS, () -> Codec.encodeBinary(task(List.of(w)), 1));
        Tensor h = Tensor.ofBytes("h", DType.FLOAT16, new long[] {1}, new byte[] {0, 0x7c});
        refused(Codes.BAD_WEIGHTS, () -> Codec.encodeBinary(task(List.of(h)), 1));
        Tensor ok = Tensor.ofFloats("w", new long[] {1}, new float[] {1});
        refused(Codes.BAD_TENSOR_TABLE, () -> Codec.encodeBinary(task(List.of(ok, ok)), 1));
        refused(Codes.BAD_TENSOR_TABLE, () -> Codec.encodeBinary(task(List.of(Tensor.ofFloats("", new long[] {1}, new float[] {1}))), 1));
        refused(Codes.BAD_MESSAGE, () -> Codec.encodeBinary(new Message.Task("t", "j", 0, 1, 1, -1, 0, 0, null, SHA_A, SHA_B, List.of()), 1));
        JsonObject clash = new JsonObject();
        clash.addProperty("round", 9);
        refused(Codes.BAD_MESSAGE, () -> Codec.encodeBinary(new Message.Result("t", "j", 0, 1, 0, new Message.Timing(0, 0, null), clash, List.of()), 1));
        refused(Codes.BAD_MESSAGE, () -> Codec.encodeBinary(new Message.Result("t", "j", 0, 1, Double.NaN, new Message.Timing(0, 0, null), null, List.of()), 1));
    }

    /** Whatever the bytes, decoding throws ProtocolException only, and never for a bug of ours. */
    @Test
    void randomCorruptionsOnlyEverRaiseProtocolExceptions() throws Exception {
        Random rng = new Random(11);
        List<byte[]> seeds = new ArrayList<>();
        for (String f : List.of("provision.bin", "task.bin", "result.bin", "hello.txt", "welcome.txt", "heartbeat.txt")) {
            seeds.add(Files.readAllBytes(Frames.goldenDir().resolve(f)));
        }
        int refusedCount = 0;
        for (int i = 0; i < 30_000; i++) {
            byte[] b = seeds.get(rng.nextInt(seeds.size())).clone();
            int flips = 1 + rng.nextInt(4);
            for (int k = 0; k < flips; k++) {
                String json = "{}[],:\"0e.-\\";
                b[rng.nextInt(b.length)] = (byte) (rng.nextBoolean() ? rng.nextInt(256) : json.charAt(rng.nextInt(json.length())));
            }
            if (rng.nextInt(10) == 0) {
                b = java.util.Arrays.copyOf(b, rng.nextInt(b.length + 1));
            }
            try {
                if (b.length > 0 && b[0] == '{') {
                    Codec.decodeText(new String(b, StandardCharsets.UTF_8));
                } else {
                    Codec.decodeBinary(ByteBuffer.wrap(b), 1, 65536L);
                }
            } catch (ProtocolException e) {
                refusedCount++;
                assertTrue(!e.code().equals(Codes.INTERNAL_ERROR), () -> "a bug: " + e.getCause());
            }
        }
        assertTrue(refusedCount > 10_000, "most corruptions are refused: " + refusedCount);
        new Gson(); // keep the Gson import honest: the library is on the classpath
    }
}
