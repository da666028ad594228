package org.pytorch.executorch.training;

import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.DataInputStream;
import java.io.File;
import java.io.IOException;
import java.io.OutputStream;
import java.io.UncheckedIOException;
import java.nio.Buffer;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.DoubleBuffer;
import java.nio.FloatBuffer;
import java.nio.IntBuffer;
import java.nio.LongBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.pytorch.executorch.DType;
import org.pytorch.executorch.Tensor;

/**
 * The Python process behind this test double of ExecuTorch's training API: ExecuTorch's own
 * runtime in Python ({@code tests/android/executorch_runtime.py}, whose docstring is the
 * protocol), started on first use and ended with the JVM. Every {@link TrainingModule} and
 * {@link SGD} call is one request and one reply.
 *
 * <p>System properties: {@value #PYTHON} the interpreter (one with executorch installed),
 * {@value #SERVER} the script, {@value #LOG} a file for the process's stderr (ExecuTorch's
 * and Python's own output; inherited when unset).
 */
public final class PythonRuntime {
    public static final String PYTHON = "mjfl.executorch.python";
    public static final String SERVER = "mjfl.executorch.server";
    public static final String LOG = "mjfl.executorch.log";

    private static PythonRuntime instance;

    private final Process process;
    private final DataInputStream in;
    private final OutputStream out;

    /** One tensor of a frame: its name (or null), dtype, shape and little-endian bytes. */
    record Blob(String name, DType dtype, long[] shape, byte[] data) {}

    /** A reply's header and its tensors by group. */
    record Reply(JsonObject header, Map<String, List<Blob>> tensors) {
        List<Blob> group(String name) {
            return tensors.getOrDefault(name, List.of());
        }
    }

    private PythonRuntime(Process process) {
        this.process = process;
        this.in = new DataInputStream(new BufferedInputStream(process.getInputStream(), 1 << 16));
        this.out = new BufferedOutputStream(process.getOutputStream(), 1 << 16);
    }

    /** The JVM's runtime process, started on the first call. */
    public static synchronized PythonRuntime get() {
        if (instance == null) {
            if (ByteOrder.nativeOrder() != ByteOrder.LITTLE_ENDIAN) {
                throw new UnsupportedOperationException("the double passes tensor memory as little-endian bytes");
            }
            String python = property(PYTHON);
            String server = property(SERVER);
            ProcessBuilder pb = new ProcessBuilder(python, server);
            String log = System.getProperty(LOG);
            pb.redirectError(log == null ? ProcessBuilder.Redirect.INHERIT : ProcessBuilder.Redirect.appendTo(new File(log)));
            try {
                instance = new PythonRuntime(pb.start());
            } catch (IOException e) {
                throw new UncheckedIOException("cannot start " + python + " " + server, e);
            }
            PythonRuntime started = instance;
            Runtime.getRuntime().addShutdownHook(new Thread(started::stop));
        }
        return instance;
    }

    private static String property(String name) {
        String value = System.getProperty(name);
        if (value == null) {
            throw new IllegalStateException("set -D" + name + " (the Python runtime behind the ExecuTorch test double)");
        }
        return value;
    }

    /** The modules and optimizers alive in the runtime: what the Java side has not yet freed. */
    public Map<String, Integer> live() {
        Reply r = call(op("live"), Map.of());
        Map<String, Integer> counts = new LinkedHashMap<>();
        counts.put("modules", r.header().get("modules").getAsInt());
        counts.put("optimizers", r.header().get("optimizers").getAsInt());
        return counts;
    }

    static JsonObject op(String name) {
        JsonObject h = new JsonObject();
        h.addProperty("op", name);
        return h;
    }

    /** Sends one request and waits for its reply; an error reply is thrown as a RuntimeException. */
    synchronized Reply call(JsonObject header, Map<String, List<Blob>> tensors) {
        try {
            write(header, tensors);
            Reply reply = read();
            JsonElement error = reply.header().get("error");
            if (error != null) {
                throw new RuntimeException("ExecuTorch (" + header.get("op").getAsString() + "): " + error.getAsString());
            }
            return reply;
        } catch (IOException e) {
            String how = process.isAlive() ? "is unreadable" : "exited with status " + process.exitValue();
            throw new UncheckedIOException("the Python runtime " + how + " (its stderr: "
                    + System.getProperty(LOG, "inherited") + ")", e);
        }
    }

    private void write(JsonObject header, Map<String, List<Blob>> tensors) throws IOException {
        JsonObject specs = new JsonObject();
        for (Map.Entry<String, List<Blob>> g : tensors.entrySet()) {
            JsonArray list = new JsonArray();
            for (Blob b : g.getValue()) {
                JsonObject spec = new JsonObject();
                if (b.name() != null) {
                    spec.addProperty("name", b.name());
                }
                spec.addProperty("dtype", b.dtype().jniCode);
                JsonArray shape = new JsonArray();
                for (long d : b.shape()) {
                    shape.add(d);
                }
                spec.add("shape", shape);
                list.add(spec);
            }
            specs.add(g.getKey(), list);
        }
        JsonObject h = header.deepCopy();
        h.add("tensors", specs);
        byte[] raw = h.toString().getBytes(StandardCharsets.UTF_8);
        out.write(ByteBuffer.allocate(4).order(ByteOrder.LITTLE_ENDIAN).putInt(raw.length).array());
        out.write(raw);
        for (List<Blob> g : tensors.values()) {
            for (Blob b : g) {
                out.write(b.data());
            }
        }
        out.flush();
    }

    private Reply read() throws IOException {
        byte[] prefix = new byte[4];
        in.readFully(prefix);
        byte[] raw = new byte[ByteBuffer.wrap(prefix).order(ByteOrder.LITTLE_ENDIAN).getInt()];
        in.readFully(raw);
        JsonObject header = JsonParser.parseString(new String(raw, StandardCharsets.UTF_8)).getAsJsonObject();
        Map<String, List<Blob>> groups = new LinkedHashMap<>();
        JsonObject specs = header.has("tensors") ? header.remove("tensors").getAsJsonObject() : new JsonObject();
        for (Map.Entry<String, JsonElement> g : specs.entrySet()) {
            List<Blob> blobs = new ArrayList<>();
            for (JsonElement e : g.getValue().getAsJsonArray()) {
                JsonObject spec = e.getAsJsonObject();
                DType dtype = DType.fromJniCode(spec.get("dtype").getAsInt());
                JsonArray dims = spec.getAsJsonArray("shape");
                long[] shape = new long[dims.size()];
                for (int i = 0; i < shape.length; i++) {
                    shape[i] = dims.get(i).getAsLong();
                }
                byte[] data = new byte[Math.toIntExact(Tensor.numel(shape) * itemSize(dtype))];
                in.readFully(data);
                blobs.add(new Blob(spec.has("name") ? spec.get("name").getAsString() : null, dtype, shape, data));
            }
            groups.put(g.getKey(), blobs);
        }
        return new Reply(header, groups);
    }

    /** Closes the process's stdin (it exits at the end of its input) and waits for it briefly. */
    private void stop() {
        try {
            out.close();
            if (!process.waitFor(10, TimeUnit.SECONDS)) {
                process.destroy();
            }
        } catch (IOException | InterruptedException e) {
            process.destroy();
        }
    }

    static int itemSize(DType dtype) {
        switch (dtype) {
            case UINT8: case INT8: case BOOL:
                return 1;
            case INT16: case HALF:
                return 2;
            case INT32: case FLOAT:
                return 4;
            case INT64: case DOUBLE:
                return 8;
            default:
                throw new IllegalArgumentException("no item size for " + dtype);
        }
    }

    /**
     * A tensor's elements as the runtime would read them: its buffer from its start to its
     * capacity (the JNI takes the buffer's address and the shape's element count, never its position).
     */
    static Blob blob(String name, Tensor t) {
        Buffer raw = t.getRawDataBuffer().duplicate().clear();
        ByteBuffer b = ByteBuffer.allocate(Math.toIntExact(t.numel() * itemSize(t.dtype()))).order(ByteOrder.LITTLE_ENDIAN);
        if (raw instanceof FloatBuffer f) {
            b.asFloatBuffer().put(f);
        } else if (raw instanceof LongBuffer l) {
            b.asLongBuffer().put(l);
        } else if (raw instanceof IntBuffer i) {
            b.asIntBuffer().put(i);
        } else if (raw instanceof DoubleBuffer d) {
            b.asDoubleBuffer().put(d);
        } else {
            throw new UnsupportedOperationException("the double passes no " + t.dtype() + " tensors");
        }
        return new Blob(name, t.dtype(), t.shape(), b.array());
    }

    /** A tensor over {@code memory} (direct, native order, exactly its elements), no copy. */
    static Tensor over(ByteBuffer memory, DType dtype, long[] shape) {
        ByteBuffer m = memory.duplicate().order(ByteOrder.nativeOrder());
        switch (dtype) {
            case FLOAT:
                return Tensor.fromBlob(m.asFloatBuffer(), shape);
            case INT64:
                return Tensor.fromBlob(m.asLongBuffer(), shape);
            case INT32:
                return Tensor.fromBlob(m.asIntBuffer(), shape);
            case DOUBLE:
                return Tensor.fromBlob(m.asDoubleBuffer(), shape);
            default:
                throw new UnsupportedOperationException("the double makes no " + dtype + " tensors");
        }
    }
}
