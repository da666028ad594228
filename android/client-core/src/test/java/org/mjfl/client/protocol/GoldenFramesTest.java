package org.mjfl.client.protocol;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonNull;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import com.google.gson.JsonPrimitive;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

/**
 * The golden frames of tests/golden/protocol (written and checked by the Python reference):
 * every valid frame decodes to the manifest's fields and tensor values and encodes back byte
 * for byte; the parts join to their message and our splitter makes the same parts; every
 * invalid frame is refused with the manifest's code.
 */
class GoldenFramesTest {
    private static final Path DIR = Frames.goldenDir();

    private static JsonObject manifest() throws IOException {
        return JsonParser.parseString(Files.readString(DIR.resolve("manifest.json"))).getAsJsonObject();
    }

    private static byte[] read(String file) throws IOException {
        return Files.readAllBytes(DIR.resolve(file));
    }

    @Test
    void manifestListsEveryKind() throws IOException {
        JsonObject m = manifest();
        assertTrue(m.getAsJsonArray("valid").size() >= 11, "valid frames");
        assertTrue(m.getAsJsonArray("invalid").size() >= 14, "invalid frames");
        List<String> types = new ArrayList<>();
        m.getAsJsonArray("valid").forEach(v -> types.add(v.getAsJsonObject().get("type").getAsString()));
        for (String t : List.of("hello", "welcome", "provision", "task", "result", "cancel", "heartbeat",
                "heartbeat_ack", "error", "bye")) {
            assertTrue(types.contains(t), "a golden " + t);
        }
    }

    @Test
    void goldenTasksComeWithAndWithoutASeed() throws IOException {
        List<Long> seeds = new ArrayList<>();
        int unseeded = 0;
        for (JsonElement e : manifest().getAsJsonArray("valid")) {
            JsonObject v = e.getAsJsonObject();
            if (v.get("type").getAsString().equals("task")) {
                Message.Task t = (Message.Task) Codec.decodeBinary(ByteBuffer.wrap(read(v.get("file").getAsString())), 1,
                        65536L);
                JsonObject fields = v.getAsJsonObject("fields");
                if (fields.has("seed")) {
                    assertEquals(fields.get("seed").getAsLong(), t.seed());
                    seeds.add(t.seed());
                } else {
                    assertNull(t.seed(), v.get("file").getAsString());
                    unseeded++;
                }
            }
        }
        assertTrue(!seeds.isEmpty() && unseeded > 0, "seeded tasks " + seeds + ", unseeded " + unseeded);
    }

    @TestFactory
    Stream<DynamicTest> validFramesDecodeToTheManifestAndEncodeBackByteForByte() throws IOException {
        List<DynamicTest> tests = new ArrayList<>();
        for (JsonElement e : manifest().getAsJsonArray("valid")) {
            JsonObject v = e.getAsJsonObject();
            String file = v.get("file").getAsString();
            tests.add(DynamicTest.dynamicTest(file, () -> {
                byte[] bytes = read(file);
                if (v.get("kind").getAsString().equals("text")) {
                    Message m = Codec.decodeText(new String(bytes, StandardCharsets.UTF_8));
                    assertEquals(v.get("type").getAsString(), m.type());
                    assertJson(v.get("fields"), fieldsOf(m), file);
                    assertArrayEquals(bytes, Codec.encodeText(m).getBytes(StandardCharsets.UTF_8), file + " re-encoded");
                } else {
                    Message.Binary m = Codec.decodeBinary(ByteBuffer.wrap(bytes), 1, 65536L);
                    assertEquals(v.get("type").getAsString(), m.type());
                    assertJson(v.get("fields"), fieldsOf(m), file);
                    JsonArray want = v.has("tensors") ? v.getAsJsonArray("tensors") : new JsonArray();
                    assertEquals(want.size(), m.tensors().size(), file + " tensor count");
                    for (int i = 0; i < want.size(); i++) {
                        JsonObject w = want.get(i).getAsJsonObject();
                        Tensor t = m.tensors().get(i);
                        assertEquals(w.get("name").getAsString(), t.name());
                        assertEquals(w.get("dtype").getAsString(), t.dtype().wireName());
                        assertJson(w.get("shape"), longs(t.shape()), file + " " + t.name() + " shape");
                        assertEquals(w.get("nbytes").getAsLong(), t.nbytes());
                        JsonArray values = w.getAsJsonArray("values");
                        double[] got = t.toDoubles();
                        assertEquals(values.size(), got.length, t.name() + " values");
                        for (int k = 0; k < got.length; k++) {
                            assertEquals(values.get(k).getAsDouble(), got[k], 0.0, t.name() + "[" + k + "]");
                        }
                    }
                    assertArrayEquals(bytes, Frames.bytes(Codec.encodeBinary(m, 1)), file + " re-encoded");
                }
            }));
        }
        return tests.stream();
    }

    @Test
    void partsJoinToTheirMessageAndTheSplitterMakesTheSameParts() throws IOException {
        JsonObject parts = manifest().getAsJsonObject("parts");
        byte[] whole = read(parts.get("of").getAsString());
        List<byte[]> files = new ArrayList<>();
        for (JsonElement f : parts.getAsJsonArray("files")) {
            files.add(read(f.getAsString()));
        }
        Parts.Reassembler r = new Parts.Reassembler(1, 256L << 20, 65536L);
        ByteBuffer joined = null;
        for (int i = 0; i < files.size(); i++) {
            joined = r.feed(ByteBuffer.wrap(files.get(i)));
            if (i < files.size() - 1) {
                assertNull(joined, "incomplete after part " + i);
            }
        }
        assertArrayEquals(whole, Frames.bytes(joined));
        Codec.decodeBinary(joined, 1, 65536L);

        List<ByteBuffer> mine = Parts.split(ByteBuffer.wrap(whole), parts.get("max_part_bytes").getAsInt());
        assertEquals(files.size(), mine.size());
        for (int i = 0; i < files.size(); i++) {
            assertArrayEquals(files.get(i), Frames.bytes(mine.get(i)), "part " + i);
        }
    }

    @TestFactory
    Stream<DynamicTest> invalidFramesAreRefusedWithTheirCode() throws IOException {
        List<DynamicTest> tests = new ArrayList<>();
        for (JsonElement e : manifest().getAsJsonArray("invalid")) {
            JsonObject v = e.getAsJsonObject();
            String file = v.get("file").getAsString();
            tests.add(DynamicTest.dynamicTest(file + " -> " + v.get("code").getAsString(), () -> {
                byte[] bytes = read(file);
                ProtocolException x = assertThrows(ProtocolException.class, () -> {
                    if (v.get("kind").getAsString().equals("text")) {
                        Codec.decodeText(new String(bytes, StandardCharsets.UTF_8));
                    } else {
                        Codec.decodeBinary(ByteBuffer.wrap(bytes), 1, 65536L);
                    }
                });
                assertEquals(v.get("code").getAsString(), x.code(), file + ": " + x.reason());
            }));
        }
        return tests.stream();
    }

    // ----------------------------------------------------------------------------------------
    // The decoded records as JSON, built field by field from the records (not by our writer).

    static JsonObject fieldsOf(Message m) {
        JsonObject o = new JsonObject();
        o.addProperty("type", m.type());
        if (m instanceof Message.Hello h) {
            o.addProperty("device_id", h.deviceId());
            o.addProperty("token", h.token());
            o.addProperty("runtime", h.runtime());
            JsonArray vs = new JsonArray();
            h.versions().forEach(vs::add);
            o.add("versions", vs);
            o.add("hardware", h.hardware());
            JsonArray cs = new JsonArray();
            h.cached().forEach(cs::add);
            o.add("cached", cs);
            o.add("max_message_bytes", num(h.maxMessageBytes()));
        } else if (m instanceof Message.Welcome w) {
            o.addProperty("version", w.version());
            o.addProperty("coordinator_id", w.coordinatorId());
            JsonObject s = new JsonObject();
            s.add("heartbeat_interval_s", num(w.settings().heartbeatIntervalS()));
            s.add("heartbeat_timeout_s", num(w.settings().heartbeatTimeoutS()));
            s.add("max_message_bytes", num(w.settings().maxMessageBytes()));
            s.add("max_control_bytes", num(w.settings().maxControlBytes()));
            o.add("settings", s);
        } else if (m instanceof Message.Provision p) {
            o.addProperty("job_id", p.jobId());
            JsonObject model = new JsonObject();
            model.addProperty("name", p.model().name());
            JsonArray shape = new JsonArray();
            p.model().inputShape().forEach(shape::add);
            model.add("input_shape", shape);
            model.addProperty("num_classes", p.model().numClasses());
            if (!p.model().batchNormPixels().isEmpty()) {
                JsonArray pixels = new JsonArray();
                p.model().batchNormPixels().forEach(pixels::add);
                model.add("batch_norm_pixels", pixels);
            }
            if (!p.model().dropoutShapes().isEmpty()) {
                JsonArray shapes = new JsonArray();
                for (List<Long> site : p.model().dropoutShapes()) {
                    JsonArray dims = new JsonArray();
                    site.forEach(dims::add);
                    shapes.add(dims);
                }
                model.add("dropout_shapes", shapes);
            }
            o.add("model", model);
            o.addProperty("program_sha256", p.programSha256());
            o.addProperty("shard_sha256", p.shardSha256());
        } else if (m instanceof Message.Task t) {
            o.addProperty("task_id", t.taskId());
            o.addProperty("job_id", t.jobId());
            o.addProperty("round", t.round());
            o.addProperty("epochs", t.epochs());
            o.addProperty("batch_size", t.batchSize());
            o.addProperty("lr", t.lr());
            o.addProperty("momentum", t.momentum());
            o.addProperty("weight_decay", t.weightDecay());
            o.add("deadline_s", num(t.deadlineS()));
            o.addProperty("program_sha256", t.programSha256());
            o.addProperty("shard_sha256", t.shardSha256());
            if (t.seed() != null) { // absent from a task without one (older coordinators send none)
                o.addProperty("seed", t.seed());
            }
        } else if (m instanceof Message.Result r) {
            o.addProperty("task_id", r.taskId());
            o.addProperty("job_id", r.jobId());
            o.addProperty("round", r.round());
            o.addProperty("samples", r.samples());
            o.addProperty("mean_loss", r.meanLoss());
            JsonObject t = new JsonObject();
            t.addProperty("download_s", r.timing().downloadS());
            t.addProperty("compute_s", r.timing().computeS());
            t.add("upload_s", num(r.timing().uploadS()));
            o.add("timing", t);
        } else if (m instanceof Message.Cancel c) {
            o.addProperty("task_id", c.taskId());
            o.addProperty("reason", c.reason());
        } else if (m instanceof Message.Heartbeat h) {
            o.addProperty("seq", h.seq());
            o.addProperty("sent_at", h.sentAt());
        } else if (m instanceof Message.HeartbeatAck a) {
            o.addProperty("seq", a.seq());
            o.addProperty("echo", a.echo());
        } else if (m instanceof Message.ErrorMessage x) {
            o.addProperty("code", x.code());
            o.addProperty("reason", x.reason());
            o.add("task_id", x.taskId() == null ? JsonNull.INSTANCE : new JsonPrimitive(x.taskId()));
        } else if (m instanceof Message.Bye b) {
            o.addProperty("code", b.code());
            o.addProperty("reason", b.reason());
        }
        return o;
    }

    private static JsonElement num(Number n) {
        return n == null ? JsonNull.INSTANCE : new JsonPrimitive(n);
    }

    private static JsonArray longs(long[] v) {
        JsonArray a = new JsonArray();
        for (long x : v) {
            a.add(x);
        }
        return a;
    }

    /** Structural equality; numbers compare by value (the re-encoding pins their spelling). */
    static void assertJson(JsonElement want, JsonElement got, String where) {
        if (want.isJsonObject()) {
            assertTrue(got.isJsonObject(), where + ": object expected, got " + got);
            JsonObject w = want.getAsJsonObject();
            JsonObject g = got.getAsJsonObject();
            assertEquals(w.keySet(), g.keySet(), where + ": fields");
            for (Map.Entry<String, JsonElement> en : w.entrySet()) {
                assertJson(en.getValue(), g.get(en.getKey()), where + "." + en.getKey());
            }
        } else if (want.isJsonArray()) {
            assertTrue(got.isJsonArray(), where + ": list expected, got " + got);
            assertEquals(want.getAsJsonArray().size(), got.getAsJsonArray().size(), where + ": length");
            for (int i = 0; i < want.getAsJsonArray().size(); i++) {
                assertJson(want.getAsJsonArray().get(i), got.getAsJsonArray().get(i), where + "[" + i + "]");
            }
        } else if (want.isJsonNull()) {
            assertTrue(got.isJsonNull(), where + ": null expected, got " + got);
        } else if (want.getAsJsonPrimitive().isNumber()) {
            assertTrue(got.isJsonPrimitive() && got.getAsJsonPrimitive().isNumber(), where + ": number expected");
            assertEquals(0, want.getAsBigDecimal().compareTo(got.getAsBigDecimal()), where + ": " + want + " vs " + got);
        } else {
            assertEquals(want, got, where);
        }
    }
}
