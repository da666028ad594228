package org.mjfl.client.protocol;

import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.function.Function;

/**
 * Reads and writes the messages of protocol v1: text messages (sections 2, 5) and binary
 * messages (section 3). Pure: no I/O, no clock. Decoding throws {@link ProtocolException} and
 * nothing else; encoding refuses, with the same exception, what a receiver would refuse.
 */
public final class Codec {
    private Codec() {}

    /** The protocol version this codec speaks. */
    public static final int VERSION = 1;
    /** Bytes of the fixed header (section 3). */
    public static final int FIXED_HEADER = 24;
    /** Flag bit 0, MORE: set only on the first part of a split message (section 4). */
    public static final int FLAG_MORE = 0x0001;
    /** "MJFL" read as a little-endian u32. */
    static final int MAGIC = 0x4C464A4D;
    /** "MJFC", a continuation part (section 4). */
    static final int MAGIC_PART = 0x43464A4D;

    static final Set<String> TEXT_TYPES =
            Set.of("hello", "welcome", "cancel", "heartbeat", "heartbeat_ack", "error", "bye");
    static final Set<String> BINARY_TYPES = Set.of("provision", "task", "result");

    static final int MAX_TOKEN = 4096;
    static final int MAX_CACHED = 4096;
    static final int MAX_VERSIONS = 64;
    static final int MAX_TENSOR_NAME = 1024;
    static final int MAX_DIMS = 32;
    static final int MAX_INPUT_DIMS = 8;
    static final int MAX_LAYERS = 1024; // batch_norm_pixels and dropout_shapes entries (5.3)

    /** Smallest multiple of 64 that is >= n (section 3). */
    public static long align64(long n) {
        return (n + 63) & ~63L;
    }

    // ----------------------------------------------------------------------------------------
    // Text messages

    /** Decodes one text message (any valid JSON layout, section 2). */
    public static Message decodeText(String text) {
        try {
            JsonObject o = StrictJson.parseObject(text);
            String type = type(o);
            if (BINARY_TYPES.contains(type)) {
                throw ProtocolException.badMessage(type + " is a binary message, sent as text");
            }
            return textFields(type, Fields.of(o, type));
        } catch (ProtocolException e) {
            throw e;
        } catch (RuntimeException e) {
            throw internal(e);
        }
    }

    /** Writes a text message as the reference writes it (compact ASCII JSON). */
    public static String encodeText(Message m) {
        PyJson w = new PyJson().beginObject().key("type").value(m.type());
        if (m instanceof Message.Hello) {
            Message.Hello h = (Message.Hello) m;
            w.key("device_id").value(h.deviceId()).key("token").value(h.token()).key("runtime").value(h.runtime());
            w.key("versions").beginArray();
            h.versions().forEach(v -> w.value((long) v));
            w.endArray().key("hardware").element("hardware", h.hardware()).key("cached").beginArray();
            h.cached().forEach(w::value);
            w.endArray().key("max_message_bytes").value(h.maxMessageBytes());
            if (h.proof() != null) {
                w.key("proof").value(h.proof());
            }
        } else if (m instanceof Message.Welcome) {
            Message.Welcome x = (Message.Welcome) m;
            Message.Settings s = x.settings();
            w.key("version").value(x.version()).key("coordinator_id").value(x.coordinatorId());
            w.key("settings").beginObject()
                    .key("heartbeat_interval_s").number("heartbeat_interval_s", s.heartbeatIntervalS())
                    .key("heartbeat_timeout_s").number("heartbeat_timeout_s", s.heartbeatTimeoutS())
                    .key("max_message_bytes").value(s.maxMessageBytes())
                    .key("max_control_bytes").value(s.maxControlBytes())
                    .endObject();
        } else if (m instanceof Message.Cancel) {
            Message.Cancel x = (Message.Cancel) m;
            w.key("task_id").value(x.taskId()).key("reason").value(x.reason());
        } else if (m instanceof Message.Heartbeat) {
            Message.Heartbeat x = (Message.Heartbeat) m;
            w.key("seq").value(x.seq()).key("sent_at").number("sent_at", x.sentAt());
        } else if (m instanceof Message.HeartbeatAck) {
            Message.HeartbeatAck x = (Message.HeartbeatAck) m;
            w.key("seq").value(x.seq()).key("echo").number("echo", x.echo());
        } else if (m instanceof Message.ErrorMessage) {
            Message.ErrorMessage x = (Message.ErrorMessage) m;
            w.key("code").value(x.code()).key("reason").value(x.reason()).key("task_id").value(x.taskId());
        } else if (m instanceof Message.Bye) {
            Message.Bye x = (Message.Bye) m;
            w.key("code").value(x.code()).key("reason").value(x.reason());
        } else {
            throw new IllegalArgumentException(m.type() + " is a binary message");
        }
        String text = w.endObject().toString();
        decodeText(text); // refuse what the receiver would refuse, by the receiver's own rules
        return text;
    }

    private static Message textFields(String type, Fields f) {
        switch (type) {
            case "hello": {
                String deviceId = f.id("device_id");
                String token = f.string("token", MAX_TOKEN);
                String runtime = f.string("runtime", 16);
                if (!runtime.equals("executorch") && !runtime.equals("torch")) {
                    throw f.fail("runtime must be \"executorch\" or \"torch\"");
                }
                JsonArray vs = f.array("versions", MAX_VERSIONS);
                if (vs.size() == 0) {
                    throw f.fail("versions is empty");
                }
                List<Integer> versions = new ArrayList<>();
                for (JsonElement v : vs) {
                    versions.add((int) f.integerOf(v, "versions", 1, 65535));
                }
                JsonObject hardware = f.object("hardware");
                List<String> cached = new ArrayList<>();
                for (JsonElement c : f.array("cached", MAX_CACHED)) {
                    JsonObject one = new JsonObject();
                    one.add("cached", c);
                    cached.add(Fields.of(one, "hello").sha256("cached"));
                }
                Long max = f.optInteger("max_message_bytes", 1, Long.MAX_VALUE);
                String proof = f.isNull("proof") ? null : f.sha256("proof"); // same form: 64 lowercase hex
                return new Message.Hello(deviceId, token, runtime, versions, hardware, cached, max, proof);
            }
            case "welcome": {
                int version = (int) f.integer("version", 1, 65535);
                String coordinatorId = f.id("coordinator_id");
                Fields s = Fields.of(f.object("settings"), "welcome settings");
                Message.Settings settings = new Message.Settings(
                        s.optNumber("heartbeat_interval_s", 0, true),
                        s.optNumber("heartbeat_timeout_s", 0, true),
                        s.optInteger("max_message_bytes", 1, Long.MAX_VALUE),
                        s.optInteger("max_control_bytes", 1, Long.MAX_VALUE));
                return new Message.Welcome(version, coordinatorId, settings);
            }
            case "cancel":
                return new Message.Cancel(f.id("task_id"), f.reason("reason"));
            case "heartbeat":
                return new Message.Heartbeat(f.integer("seq", 1, Long.MAX_VALUE), f.number("sent_at"));
            case "heartbeat_ack":
                return new Message.HeartbeatAck(f.integer("seq", 1, Long.MAX_VALUE), f.number("echo"));
            case "error":
                return new Message.ErrorMessage(f.code("code"), f.reason("reason"), f.optId("task_id"));
            case "bye":
                return new Message.Bye(f.code("code"), f.reason("reason"));
            default:
                throw new ProtocolException(Codes.UNKNOWN_TYPE, "unknown type " + Text.quote(type));
        }
    }

    // ----------------------------------------------------------------------------------------
    // Binary messages

    /** Section 3's fixed header, read but only partly checked (see {@link #readFrameHeader}). */
    record FrameHeader(int flags, long headerLen, long payloadOffset, long payloadLen) {
        long total() {
            return payloadOffset + payloadLen;
        }
    }

    /**
     * Decodes one whole binary message: fixed header, JSON header, canonical tensor table.
     * Tensors are read-only views into {@code message} (no copy). Weights are not checked for
     * finiteness here: that is the session's rule (7.2), with its own code.
     *
     * @param version the session's protocol version, which the fixed header must carry
     * @param maxControlBytes largest JSON header accepted, or null for no limit
     */
    public static Message.Binary decodeBinary(ByteBuffer message, int version, Long maxControlBytes) {
        try {
            ByteBuffer b = message.slice().order(ByteOrder.LITTLE_ENDIAN);
            FrameHeader h = readFrameHeader(b, version);
            if (h.flags() != 0) {
                throw new ProtocolException(Codes.BAD_FRAME, "flags must be 0 on a whole message");
            }
            if (b.remaining() != h.total()) {
                throw new ProtocolException(Codes.BAD_FRAME, "message is " + b.remaining()
                        + " bytes, its header says " + h.total());
            }
            JsonObject o = jsonHeader(b, h, maxControlBytes);
            String type = binaryType(o);
            List<Entry> table = table(o, type, h.payloadLen());
            Function<List<Tensor>, Message.Binary> build = binaryFields(type, Fields.of(o, type), table);
            ByteBuffer payload = b.duplicate();
            payload.position((int) h.payloadOffset());
            payload = payload.slice().asReadOnlyBuffer();
            List<Tensor> tensors = new ArrayList<>(table.size());
            for (Entry e : table) {
                ByteBuffer view = payload.duplicate();
                view.limit((int) (e.offset() + e.nbytes())).position((int) e.offset());
                tensors.add(new Tensor(e.name(), e.dtype(), e.shape(), view));
            }
            return build.apply(tensors);
        } catch (ProtocolException e) {
            throw e;
        } catch (RuntimeException e) {
            throw internal(e);
        }
    }

    /**
     * Checks what the first part of a split message already shows (section 4: "a receiver
     * checks the first part's headers and limits before the rest arrives"): everything but the
     * payload bytes.
     */
    static void checkFirstPart(ByteBuffer b, FrameHeader h, Long maxControlBytes) {
        try {
            JsonObject o = jsonHeader(b, h, maxControlBytes);
            String type = binaryType(o);
            binaryFields(type, Fields.of(o, type), table(o, type, h.payloadLen()));
        } catch (ProtocolException e) {
            throw e;
        } catch (RuntimeException e) {
            throw internal(e);
        }
    }

    /**
     * Reads the fixed header and checks magic, version and payload_offset; the caller checks
     * flags and length, which differ between a whole message and a first part.
     * {@code b} is little-endian with the message at index 0.
     */
    static FrameHeader readFrameHeader(ByteBuffer b, int version) {
        if (b.remaining() < FIXED_HEADER) {
            throw new ProtocolException(Codes.BAD_FRAME, "shorter than the 24-byte fixed header");
        }
        int magic = b.getInt(0);
        if (magic == MAGIC_PART) {
            throw new ProtocolException(Codes.BAD_FRAME, "continuation part without a first part");
        }
        if (magic != MAGIC) {
            throw new ProtocolException(Codes.BAD_FRAME, "bad magic");
        }
        int v = b.getShort(4) & 0xffff;
        if (v != version) {
            throw new ProtocolException(Codes.BAD_FRAME, "version " + v + " in a version " + version + " session");
        }
        int flags = b.getShort(6) & 0xffff;
        long headerLen = b.getInt(8) & 0xffffffffL;
        long payloadOffset = b.getInt(12) & 0xffffffffL;
        long payloadLen = b.getLong(16);
        if (payloadOffset != align64(FIXED_HEADER + headerLen)) {
            throw new ProtocolException(Codes.BAD_FRAME, "payload_offset is not align64(24 + header_len)");
        }
        if (payloadLen < 0) {
            throw new ProtocolException(Codes.BAD_FRAME, "payload_len beyond 2^63");
        }
        return new FrameHeader(flags, headerLen, payloadOffset, payloadLen);
    }

    private static JsonObject jsonHeader(ByteBuffer b, FrameHeader h, Long maxControlBytes) {
        if (maxControlBytes != null && h.headerLen() > maxControlBytes) {
            throw new ProtocolException(Codes.MESSAGE_TOO_BIG,
                    "JSON header of " + h.headerLen() + " bytes, the limit is " + maxControlBytes);
        }
        if (FIXED_HEADER + h.headerLen() > b.remaining()) {
            throw new ProtocolException(Codes.BAD_FRAME, "JSON header runs past the message");
        }
        ByteBuffer json = b.duplicate();
        json.limit((int) (FIXED_HEADER + h.headerLen())).position(FIXED_HEADER);
        return StrictJson.parseObject(StrictJson.utf8(json.slice()));
    }

    private static String binaryType(JsonObject o) {
        String type = type(o);
        if (TEXT_TYPES.contains(type)) {
            throw ProtocolException.badMessage(type + " is a text message, sent as binary");
        }
        if (!BINARY_TYPES.contains(type)) {
            throw new ProtocolException(Codes.UNKNOWN_TYPE, "unknown type " + Text.quote(type));
        }
        return type;
    }

    /** One tensor table entry (section 3). */
    record Entry(String name, DType dtype, long[] shape, long offset, long nbytes) {}

    /**
     * Section 3: "The layout is canonical" - first tensor at 0, each next at align64 of the
     * previous end, nbytes = product(shape) x itemsize, unique names, and the table covers
     * the payload exactly. Anything wrong with the table, its absence included, is
     * bad_tensor_table (section 8).
     */
    private static List<Entry> table(JsonObject o, String type, long payloadLen) {
        Fields tf = new Fields(o, type, Codes.BAD_TENSOR_TABLE);
        JsonElement t = o.get("tensors");
        if (t == null || !t.isJsonArray()) {
            throw tf.fail("tensors must be a list");
        }
        List<Entry> entries = new ArrayList<>();
        Set<String> names = new HashSet<>();
        long expected = 0;
        long end = 0;
        for (JsonElement el : t.getAsJsonArray()) {
            if (!el.isJsonObject()) {
                throw tf.fail("a tensor table entry must be an object");
            }
            Fields f = new Fields(el.getAsJsonObject(), "tensor table", Codes.BAD_TENSOR_TABLE);
            String name = f.string("name", MAX_TENSOR_NAME);
            if (name.isEmpty()) {
                throw f.fail("empty tensor name");
            }
            if (!names.add(name)) {
                throw f.fail("duplicate tensor name " + Text.quote(name));
            }
            String dtypeName = f.string("dtype", 16);
            DType dtype = DType.fromWire(dtypeName);
            if (dtype == null) {
                throw f.fail("unknown dtype " + Text.quote(dtypeName));
            }
            JsonArray dims = f.array("shape", MAX_DIMS);
            long[] shape = new long[dims.size()];
            for (int i = 0; i < shape.length; i++) {
                shape[i] = f.integerOf(dims.get(i), "shape", 0, Long.MAX_VALUE);
            }
            long offset = f.integer("offset");
            long nbytes = f.integer("nbytes");
            long want;
            try {
                want = Tensor.nbytes(dtype, shape);
            } catch (ArithmeticException e) {
                throw f.fail(name + ": shape too large");
            }
            if (nbytes != want) {
                throw f.fail(name + ": nbytes " + nbytes + ", its dtype and shape make " + want);
            }
            if (offset != expected) {
                throw f.fail(name + ": offset " + offset + ", the canonical layout puts it at " + expected);
            }
            if (nbytes > payloadLen - offset) {
                throw f.fail(name + " runs past the payload");
            }
            end = offset + nbytes;
            expected = align64(end);
            entries.add(new Entry(name, dtype, shape, offset, nbytes));
        }
        if (end != payloadLen) {
            throw tf.fail("the tensors end at " + end + ", payload_len is " + payloadLen);
        }
        return entries;
    }

    private static Function<List<Tensor>, Message.Binary> binaryFields(String type, Fields f, List<Entry> table) {
        switch (type) {
            case "provision": {
                String jobId = f.id("job_id");
                Fields m = Fields.of(f.object("model"), "provision model");
                String name = m.id("name");
                JsonArray dims = m.array("input_shape", MAX_INPUT_DIMS);
                if (dims.size() == 0) {
                    throw m.fail("input_shape is empty");
                }
                List<Long> inputShape = new ArrayList<>();
                for (JsonElement d : dims) {
                    inputShape.add(m.integerOf(d, "input_shape", 1, Long.MAX_VALUE));
                }
                long numClasses = m.integer("num_classes", 1, Long.MAX_VALUE);
                // Optional (v1 minor additions): absent or null means none.
                List<Long> pixels = new ArrayList<>();
                if (!m.isNull("batch_norm_pixels")) {
                    for (JsonElement p : m.array("batch_norm_pixels", MAX_LAYERS)) {
                        pixels.add(m.integerOf(p, "batch_norm_pixels", 1, Long.MAX_VALUE));
                    }
                }
                List<List<Long>> noise = new ArrayList<>();
                if (!m.isNull("dropout_shapes")) {
                    for (JsonElement site : m.array("dropout_shapes", MAX_LAYERS)) {
                        if (!site.isJsonArray() || site.getAsJsonArray().size() == 0
                                || site.getAsJsonArray().size() > MAX_DIMS) {
                            throw m.fail("dropout_shapes must hold shapes of 1 to " + MAX_DIMS + " ints");
                        }
                        List<Long> shape = new ArrayList<>();
                        for (JsonElement d : site.getAsJsonArray()) {
                            shape.add(m.integerOf(d, "dropout_shapes", 1, Long.MAX_VALUE));
                        }
                        noise.add(shape);
                    }
                }
                Message.ModelSpec model = new Message.ModelSpec(name, inputShape, numClasses, pixels, noise);
                String program = f.sha256("program_sha256");
                String shard = f.sha256("shard_sha256");
                checkProvisionTable(f, table, model);
                return ts -> {
                    // 5.3: every label in [0, num_classes), else bad_message.
                    for (Tensor t : ts) {
                        if (t.name().equals("y")) {
                            for (long label : t.toLongs()) {
                                if (label < 0 || label >= numClasses) {
                                    throw f.fail("label " + label + " outside [0, " + numClasses + ")");
                                }
                            }
                        }
                    }
                    return new Message.Provision(jobId, model, program, shard, ts);
                };
            }
            case "task": {
                String taskId = f.id("task_id");
                String jobId = f.id("job_id");
                long round = f.integer("round");
                long epochs = f.integer("epochs", 1, Long.MAX_VALUE);
                long batchSize = f.integer("batch_size", 1, Long.MAX_VALUE);
                double lr = f.number("lr", 0, false);
                double momentum = f.number("momentum", 0, false);
                double weightDecay = f.number("weight_decay", 0, false);
                Double deadline = f.optNumber("deadline_s", 0, true);
                String program = f.sha256("program_sha256");
                String shard = f.sha256("shard_sha256");
                // Absent or null from a coordinator that sends none (docs/models.md, "The task generator").
                Long seed = f.optInteger("seed", 0, Long.MAX_VALUE);
                return ts -> new Message.Task(taskId, jobId, round, epochs, batchSize, lr, momentum, weightDecay,
                        deadline, program, shard, seed, ts);
            }
            case "result": {
                String taskId = f.id("task_id");
                String jobId = f.id("job_id");
                long round = f.integer("round");
                long samples = f.integer("samples");
                double meanLoss = f.number("mean_loss");
                Fields t = Fields.of(f.object("timing"), "result timing");
                Message.Timing timing = new Message.Timing(t.number("download_s", 0, false),
                        t.number("compute_s", 0, false), t.optNumber("upload_s", 0, false));
                return ts -> new Message.Result(taskId, jobId, round, samples, meanLoss, timing, null, ts);
            }
            default:
                throw new IllegalStateException(type);
        }
    }

    /** 5.3: a subset of program (uint8 [n]), x (float32 [n, *input_shape]), y (int64 [n]); x and y together. */
    private static void checkProvisionTable(Fields f, List<Entry> table, Message.ModelSpec model) {
        Entry x = null;
        Entry y = null;
        for (Entry e : table) {
            switch (e.name()) {
                case "program":
                    if (e.dtype() != DType.UINT8 || e.shape().length != 1) {
                        throw f.fail("program must be uint8 [n]");
                    }
                    break;
                case "x":
                    x = e;
                    break;
                case "y":
                    y = e;
                    break;
                default:
                    throw f.fail("tensor " + Text.quote(e.name()) + " is not program, x or y");
            }
        }
        if ((x == null) != (y == null)) {
            throw f.fail("x and y travel together");
        }
        if (x == null) {
            return;
        }
        long[] xs = x.shape();
        boolean xOk = x.dtype() == DType.FLOAT32 && xs.length == 1 + model.inputShape().size();
        for (int i = 1; xOk && i < xs.length; i++) {
            xOk = xs[i] == model.inputShape().get(i - 1);
        }
        if (!xOk) {
            throw f.fail("x must be float32 [n, *input_shape]");
        }
        if (y.dtype() != DType.INT64 || y.shape().length != 1 || y.shape()[0] != xs[0]) {
            throw f.fail("y must be int64 [n] with x's n");
        }
    }

    /**
     * Writes a binary message: fixed header, JSON header, zero padding, tensors at their
     * canonical offsets (section 3). Task and result weights must be finite (bad_weights).
     */
    public static ByteBuffer encodeBinary(Message.Binary m, int version) {
        PyJson w = new PyJson().beginObject().key("type").value(m.type());
        if (m instanceof Message.Provision) {
            Message.Provision p = (Message.Provision) m;
            w.key("job_id").value(p.jobId()).key("model").beginObject()
                    .key("name").value(p.model().name()).key("input_shape").beginArray();
            p.model().inputShape().forEach(d -> w.value((long) d));
            w.endArray().key("num_classes").value(p.model().numClasses());
            if (!p.model().batchNormPixels().isEmpty()) {
                w.key("batch_norm_pixels").beginArray();
                p.model().batchNormPixels().forEach(d -> w.value((long) d));
                w.endArray();
            }
            if (!p.model().dropoutShapes().isEmpty()) {
                w.key("dropout_shapes").beginArray();
                for (List<Long> shape : p.model().dropoutShapes()) {
                    w.beginArray();
                    shape.forEach(d -> w.value((long) d));
                    w.endArray();
                }
                w.endArray();
            }
            w.endObject()
                    .key("program_sha256").value(p.programSha256()).key("shard_sha256").value(p.shardSha256());
        } else if (m instanceof Message.Task) {
            Message.Task t = (Message.Task) m;
            w.key("task_id").value(t.taskId()).key("job_id").value(t.jobId()).key("round").value(t.round())
                    .key("epochs").value(t.epochs()).key("batch_size").value(t.batchSize())
                    .key("lr").number("lr", t.lr()).key("momentum").number("momentum", t.momentum())
                    .key("weight_decay").number("weight_decay", t.weightDecay())
                    .key("deadline_s").number("deadline_s", t.deadlineS())
                    .key("program_sha256").value(t.programSha256()).key("shard_sha256").value(t.shardSha256());
            if (t.seed() != null) { // written only when there is one, as the Python coordinator does
                w.key("seed").value((long) t.seed());
            }
        } else {
            Message.Result r = (Message.Result) m;
            Message.Timing tm = r.timing();
            w.key("task_id").value(r.taskId()).key("job_id").value(r.jobId()).key("round").value(r.round())
                    .key("samples").value(r.samples()).key("mean_loss").number("mean_loss", r.meanLoss())
                    .key("timing").beginObject()
                    .key("download_s").number("download_s", tm.downloadS())
                    .key("compute_s").number("compute_s", tm.computeS())
                    .key("upload_s").number("upload_s", tm.uploadS())
                    .endObject();
            if (r.extraFields() != null) {
                for (Map.Entry<String, JsonElement> e : r.extraFields().entrySet()) {
                    if (RESULT_FIELDS.contains(e.getKey())) {
                        throw ProtocolException.badMessage("extra result field " + e.getKey() + " is a protocol field");
                    }
                    w.key(e.getKey()).element(e.getKey(), e.getValue());
                }
            }
        }
        if (!(m instanceof Message.Provision)) {
            for (Tensor t : m.tensors()) {
                if (!t.allFinite()) {
                    throw new ProtocolException(Codes.BAD_WEIGHTS, "tensor " + t.name() + " holds NaN or infinite values");
                }
            }
        }
        long offset = 0;
        long end = 0;
        long[] offsets = new long[m.tensors().size()];
        w.key("tensors").beginArray();
        for (int i = 0; i < offsets.length; i++) {
            Tensor t = m.tensors().get(i);
            offsets[i] = offset;
            w.beginObject().key("name").value(t.name()).key("dtype").value(t.dtype().wireName()).key("shape").beginArray();
            for (long d : t.shape()) {
                w.value(d);
            }
            w.endArray().key("offset").value(offset).key("nbytes").value((long) t.nbytes()).endObject();
            end = offset + t.nbytes();
            offset = align64(end);
        }
        byte[] header = w.endArray().endObject().toString().getBytes(StandardCharsets.US_ASCII);
        long payloadOffset = align64(FIXED_HEADER + header.length);
        long total = payloadOffset + end;
        if (total > Integer.MAX_VALUE - 8) {
            throw new ProtocolException(Codes.MESSAGE_TOO_BIG, "a message of " + total + " bytes");
        }
        ByteBuffer out = ByteBuffer.allocate((int) total).order(ByteOrder.LITTLE_ENDIAN); // zero-filled: padding
        out.putInt(MAGIC).putShort((short) version).putShort((short) 0).putInt(header.length)
                .putInt((int) payloadOffset).putLong(end).put(header);
        for (int i = 0; i < offsets.length; i++) {
            out.position((int) (payloadOffset + offsets[i]));
            out.put(m.tensors().get(i).data());
        }
        out.clear();
        decodeBinary(out, version, null); // refuse what the receiver would refuse, by its own rules
        return out;
    }

    private static final Set<String> RESULT_FIELDS =
            Set.of("type", "task_id", "job_id", "round", "samples", "mean_loss", "timing", "tensors");

    // ----------------------------------------------------------------------------------------

    private static String type(JsonObject o) {
        Fields f = Fields.of(o, "message");
        return f.string("type", 64);
    }

    private static ProtocolException internal(RuntimeException e) {
        return new ProtocolException(Codes.INTERNAL_ERROR, "internal error", e);
    }
}
