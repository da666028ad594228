package org.pytorch.executorch.training;

import com.facebook.jni.HybridData;
import com.google.gson.JsonObject;
import java.io.Closeable;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.WeakHashMap;
import org.pytorch.executorch.DType;
import org.pytorch.executorch.EValue;
import org.pytorch.executorch.Tensor;
import org.pytorch.executorch.training.PythonRuntime.Blob;

/**
 * Test double of executorch-android 1.5.1's TrainingModule (training/TrainingModule.kt): the
 * program runs in ExecuTorch's Python runtime ({@link PythonRuntime}), every call forwarded.
 *
 * <p>How the runtime's memory is simulated. On a phone, {@link #namedParameters} returns
 * tensors whose direct buffers are the runtime's parameter memory, so a write through
 * {@code getRawDataBuffer()} is a write into the runtime, {@link SGD#step} changes what those
 * buffers hold, and {@link #namedGradients} tensors show each step's gradients. Here the
 * runtime lives in another process, so this module keeps one direct buffer per parameter and
 * per gradient, which stands for that memory: every tensor it hands out is a view of those
 * buffers (never a copy), and it keeps them in sync with the runtime both ways: before each
 * call it sends the parameters whose bytes Java changed since the runtime last had them
 * ({@link Memory#changed}), and it copies back what the runtime's parameters hold after
 * {@code namedParameters} and {@code SGD.step}, and the gradients after each
 * {@code executeForwardBackward}, into the same buffers. A program that wrote into a copy, or
 * read a stale one, goes as wrong here as on a phone.
 *
 * <p>Outputs of {@code executeForwardBackward} likewise alias memory that the next call
 * overwrites (one buffer per output position, as the runtime's planned memory).
 */
public final class TrainingModule implements Closeable {
    /** Every parameter tensor handed out, to the memory it views ({@link SGD#create} finds it here). */
    private static final Map<Tensor, Binding> HANDED_OUT = new WeakHashMap<>();

    /** The module and parameter whose memory a tensor views. */
    record Binding(TrainingModule module, String name) {}

    private final PythonRuntime runtime;
    private final long id;
    private final HybridData mHybridData;
    private volatile boolean mDestroyed;
    /** The runtime's parameters by name, in the method's order; known from the first call. */
    private final Map<String, Memory> parameters = new LinkedHashMap<>();
    private final Map<String, Memory> gradients = new LinkedHashMap<>();
    private final List<ByteBuffer> outputs = new ArrayList<>();

    private TrainingModule(PythonRuntime runtime, long id) {
        this.runtime = runtime;
        this.id = id;
        this.mHybridData = new HybridData(() -> runtime.call(request("close"), Map.of()));
    }

    public static TrainingModule load(String modelPath) {
        if (!Files.isRegularFile(Path.of(modelPath))) {
            throw new RuntimeException("Cannot load model path!! " + modelPath);
        }
        PythonRuntime runtime = PythonRuntime.get();
        JsonObject h = PythonRuntime.op("load");
        h.addProperty("path", Path.of(modelPath).toAbsolutePath().toString());
        return new TrainingModule(runtime, runtime.call(h, Map.of()).header().get("module").getAsLong());
    }

    public static TrainingModule load(String modelPath, String dataPath) {
        throw new UnsupportedOperationException("the double loads programs with their weights inside (no .ptd)");
    }

    public synchronized EValue[] executeForwardBackward(String methodName, EValue... inputs) {
        checkNotDestroyed();
        List<Blob> in = new ArrayList<>();
        for (EValue v : inputs) {
            in.add(PythonRuntime.blob(null, v.toTensor()));
        }
        JsonObject h = request("forward_backward");
        h.addProperty("method", methodName);
        Map<String, List<Blob>> tensors = new LinkedHashMap<>();
        tensors.put("write", writes());
        tensors.put("inputs", in);
        PythonRuntime.Reply r = runtime.call(h, tensors);
        store(gradients, r.group("gradients"));
        List<Blob> outs = r.group("outputs");
        EValue[] values = new EValue[outs.size()];
        for (int i = 0; i < outs.size(); i++) {
            Blob b = outs.get(i);
            if (outputs.size() == i) {
                outputs.add(ByteBuffer.allocateDirect(0));
            }
            if (outputs.get(i).capacity() < b.data().length) {
                outputs.set(i, ByteBuffer.allocateDirect(b.data().length).order(ByteOrder.nativeOrder()));
            }
            ByteBuffer memory = outputs.get(i).slice(0, b.data().length);
            memory.put(b.data());
            values[i] = EValue.from(PythonRuntime.over(memory.clear(), b.dtype(), b.shape()));
        }
        return values;
    }

    public synchronized Map<String, Tensor> namedParameters(String methodName) {
        checkNotDestroyed();
        JsonObject h = request("parameters");
        h.addProperty("method", methodName);
        store(parameters, runtime.call(h, Map.of("write", writes())).group("parameters"));
        Map<String, Tensor> out = new HashMap<>();
        synchronized (HANDED_OUT) {
            for (Map.Entry<String, Memory> e : parameters.entrySet()) {
                Tensor t = e.getValue().tensor();
                HANDED_OUT.put(t, new Binding(this, e.getKey()));
                out.put(e.getKey(), t);
            }
        }
        return out;
    }

    public synchronized Map<String, Tensor> namedGradients(String methodName) {
        checkNotDestroyed();
        if (gradients.isEmpty()) {
            throw new RuntimeException("No gradients of " + methodName + ": call executeForwardBackward first");
        }
        Map<String, Tensor> out = new HashMap<>();
        for (Map.Entry<String, Memory> e : gradients.entrySet()) {
            out.put(e.getKey(), e.getValue().tensor());
        }
        return out;
    }

    @Override
    public synchronized void close() {
        if (!mDestroyed) {
            mDestroyed = true;
            mHybridData.resetNative();
        }
    }

    static Binding bindingOf(Tensor t) {
        synchronized (HANDED_OUT) {
            return HANDED_OUT.get(t);
        }
    }

    PythonRuntime runtime() {
        return runtime;
    }

    long id() {
        return id;
    }

    void checkNotDestroyed() {
        if (mDestroyed) {
            throw new IllegalStateException("TrainingModule has been destroyed");
        }
    }

    JsonObject request(String op) {
        JsonObject h = PythonRuntime.op(op);
        h.addProperty("module", id);
        return h;
    }

    /** The parameters Java changed since the runtime last had them; from now on the runtime has them. */
    synchronized List<Blob> writes() {
        List<Blob> out = new ArrayList<>();
        for (Map.Entry<String, Memory> e : parameters.entrySet()) {
            if (e.getValue().changed()) {
                out.add(e.getValue().sent(e.getKey()));
            }
        }
        return out;
    }

    /** What the runtime's parameters hold now, into the buffers Java reads them through. */
    synchronized void storeParameters(List<Blob> values) {
        store(parameters, values);
    }

    private static void store(Map<String, Memory> memories, List<Blob> values) {
        for (Blob b : values) {
            Memory m = memories.get(b.name());
            if (m == null) {
                memories.put(b.name(), new Memory(b));
            } else {
                m.store(b);
            }
        }
    }

    /** Java's stand-in for one tensor of runtime memory, and the bytes the runtime last had. */
    static final class Memory {
        private final DType dtype;
        private final long[] shape;
        private final ByteBuffer bytes;
        private final ByteBuffer synced;

        Memory(Blob b) {
            this.dtype = b.dtype();
            this.shape = b.shape();
            this.bytes = ByteBuffer.allocateDirect(b.data().length).order(ByteOrder.nativeOrder());
            this.synced = ByteBuffer.allocate(b.data().length);
            store(b);
        }

        void store(Blob b) {
            if (b.dtype() != dtype || b.data().length != bytes.capacity()) {
                throw new IllegalStateException("runtime tensor " + b.name() + " changed its dtype or size");
            }
            bytes.clear();
            bytes.put(b.data());
            synced.clear();
            synced.put(b.data());
        }

        /** True when Java wrote into the memory since the runtime last had it. */
        boolean changed() {
            return !bytes.duplicate().clear().equals(synced.duplicate().clear());
        }

        /** The memory's bytes, to send; marks them as the runtime's. */
        Blob sent(String name) {
            byte[] now = new byte[bytes.capacity()];
            bytes.duplicate().clear().get(now);
            synced.clear();
            synced.put(now);
            return new Blob(name, dtype, shape, now);
        }

        Tensor tensor() {
            return PythonRuntime.over(bytes.duplicate().clear(), dtype, shape);
        }
    }
}
