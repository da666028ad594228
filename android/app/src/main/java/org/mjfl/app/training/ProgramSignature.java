package org.mjfl.app.training;

import java.io.IOException;
import java.nio.BufferUnderflowException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * What a device must know about a training program before running it, read from the
 * {@code .pte} file itself (docs/models.md, "Training a task on a device"): the inputs of
 * {@code forward} ({@code x}, {@code y}, then one noise tensor per dropout site, all reported at
 * the program's batch bound), the parameters' names and shapes ({@code __et_training_fqn_forward}),
 * where the gradients and the parameters start among the outputs, and the memory the runtime
 * plans for it.
 *
 * <p>ExecuTorch's Java API has no method metadata beyond names and backends (its
 * {@code MethodMetadata}), so the program's flatbuffer is read here, following
 * {@code schema/program.fbs} (identical in executorch 1.4 and 1.5.1): {@code Program.execution_plan}
 * -> {@code ExecutionPlan{name, values, inputs, outputs, non_const_buffer_sizes}} ->
 * {@code EValue{val: KernelTypes}}.
 */
public final class ProgramSignature {
    /** ExecuTorch's ScalarType codes (schema/scalar_type.fbs). */
    public static final int SCALAR_LONG = 4;
    public static final int SCALAR_FLOAT = 6;

    /** One tensor value of a method: its ScalarType code and sizes (at the batch bound). */
    public record TensorSpec(int scalarType, long[] sizes) {
        public TensorSpec {
            sizes = sizes.clone();
        }

        @Override
        public long[] sizes() {
            return sizes.clone();
        }

        @Override
        public String toString() {
            return "scalar_type " + scalarType + " " + Arrays.toString(sizes);
        }
    }

    private final List<TensorSpec> inputs;
    private final List<String> parameterNames;
    private final List<long[]> parameterShapes;
    private final int gradientsIndex;
    private final int parametersIndex;
    private final long plannedBytes;

    private ProgramSignature(List<TensorSpec> inputs, List<String> parameterNames, List<long[]> parameterShapes,
            int gradientsIndex, int parametersIndex, long plannedBytes) {
        this.inputs = List.copyOf(inputs);
        this.parameterNames = List.copyOf(parameterNames);
        this.parameterShapes = List.copyOf(parameterShapes);
        this.gradientsIndex = gradientsIndex;
        this.parametersIndex = parametersIndex;
        this.plannedBytes = plannedBytes;
    }

    /** Reads and checks the signature of {@code method} (mjfl's programs: "forward"). */
    public static ProgramSignature read(ByteBuffer pte, String method) throws ProgramException {
        Flat f = new Flat(pte);
        try {
            return read(f, method);
        } catch (IndexOutOfBoundsException | BufferUnderflowException | IllegalArgumentException | ArithmeticException e) {
            throw new ProgramException("not a readable ExecuTorch program: " + e.getMessage());
        }
    }

    /** Reads the signature from a program file, mapped, not loaded into any runtime. */
    public static ProgramSignature read(Path pte, String method) throws IOException, ProgramException {
        try (FileChannel ch = FileChannel.open(pte, StandardOpenOption.READ)) {
            return read(ch.map(FileChannel.MapMode.READ_ONLY, 0, ch.size()), method);
        }
    }

    private static ProgramSignature read(Flat f, String method) throws ProgramException {
        if (f.b.limit() < 8 || !"ET12".equals(f.ascii(4, 4))) {
            throw new ProgramException("not an ExecuTorch program (no ET12 identifier)");
        }
        int program = f.root();
        int forward = f.plan(program, method);
        int gradPlan = f.plan(program, "__et_training_gradients_index_" + method);
        int paramPlan = f.plan(program, "__et_training_parameters_index_" + method);
        int fqnPlan = f.plan(program, "__et_training_fqn_" + method);
        if (forward < 0 || gradPlan < 0 || paramPlan < 0 || fqnPlan < 0) {
            throw new ProgramException("not a training program: method " + method + " or its training metadata is missing");
        }
        long gradientsIndex = f.intOutput(gradPlan);
        long parametersIndex = f.intOutput(paramPlan);
        List<String> names = f.stringOutputs(fqnPlan);

        List<TensorSpec> inputs = new ArrayList<>();
        int inputIdx = f.ref(forward, Flat.PLAN_INPUTS);
        for (int i = 0; i < f.length(inputIdx); i++) {
            inputs.add(f.tensorValue(forward, f.intAt(inputIdx, i)));
        }
        int outputIdx = f.ref(forward, Flat.PLAN_OUTPUTS);
        int outputs = f.length(outputIdx);
        if (gradientsIndex < 2 || parametersIndex - gradientsIndex != names.size()
                || parametersIndex + names.size() != outputs) {
            throw new ProgramException("training metadata does not fit the outputs: gradients at " + gradientsIndex
                    + ", parameters at " + parametersIndex + ", " + names.size() + " names, " + outputs + " outputs");
        }
        List<long[]> shapes = new ArrayList<>();
        for (int i = 0; i < names.size(); i++) {
            shapes.add(f.tensorValue(forward, f.intAt(outputIdx, (int) parametersIndex + i)).sizes());
        }
        // TrainingModule loads the three index methods beside the method itself, each with its
        // own planned memory (tiny: they return constants).
        long planned = 0;
        for (int plan : new int[] {forward, gradPlan, paramPlan, fqnPlan}) {
            planned = Math.addExact(planned, f.plannedBytes(plan));
        }
        return of(inputs, names, shapes, (int) gradientsIndex, planned);
    }

    /** A signature from its parts, checked as one read from a file (for test programs); no planned memory. */
    static ProgramSignature of(List<TensorSpec> inputs, List<String> parameterNames, List<long[]> parameterShapes,
            int gradientsIndex) throws ProgramException {
        return of(inputs, parameterNames, parameterShapes, gradientsIndex, 0);
    }

    /** A signature from its parts, checked as one read from a file (for test programs). */
    static ProgramSignature of(List<TensorSpec> inputs, List<String> parameterNames, List<long[]> parameterShapes,
            int gradientsIndex, long plannedBytes) throws ProgramException {
        if (parameterShapes.size() != parameterNames.size() || gradientsIndex < 2 || gradientsIndex % 2 != 0) {
            throw new ProgramException("gradients at " + gradientsIndex + " after loss, logits and pairs of batch "
                    + "statistics; " + parameterNames.size() + " names, " + parameterShapes.size() + " shapes");
        }
        if (plannedBytes < 0) {
            throw new ProgramException("planned memory of " + plannedBytes + " bytes");
        }
        ProgramSignature s = new ProgramSignature(inputs, parameterNames, parameterShapes, gradientsIndex,
                gradientsIndex + parameterNames.size(), plannedBytes);
        s.check();
        return s;
    }

    private void check() throws ProgramException {
        if (inputs.size() < 2) {
            throw new ProgramException("forward takes " + inputs.size() + " inputs, a training program takes x, y, noise...");
        }
        TensorSpec x = inputs.get(0);
        TensorSpec y = inputs.get(1);
        if (x.scalarType() != SCALAR_FLOAT || x.sizes.length < 2 || Arrays.stream(x.sizes).anyMatch(d -> d < 1)) {
            throw new ProgramException("input x is " + x + ", expected float32 [N, *input_shape]");
        }
        if (y.scalarType() != SCALAR_LONG || !Arrays.equals(y.sizes, new long[] {x.sizes[0]})) {
            throw new ProgramException("input y is " + y + ", expected int64 [" + x.sizes[0] + "]");
        }
        for (int i = 2; i < inputs.size(); i++) {
            TensorSpec n = inputs.get(i);
            if (n.scalarType() != SCALAR_FLOAT || n.sizes.length < 1 || n.sizes[n.sizes.length - 1] != x.sizes[0]) {
                throw new ProgramException("noise input " + (i - 2) + " is " + n + ", expected float32 [*features, "
                        + x.sizes[0] + "]");
            }
        }
    }

    /** The program's batch bound: the N its inputs are reported at (256 for mjfl's programs). */
    public int maxBatch() {
        return Math.toIntExact(inputs.get(0).sizes[0]);
    }

    /** One sample's shape: x's sizes after the batch. */
    public long[] sampleShape() {
        long[] s = inputs.get(0).sizes;
        return Arrays.copyOfRange(s, 1, s.length);
    }

    /** Each dropout site's features: the noise input's sizes without the batch (last). */
    public List<long[]> noiseFeatures() {
        List<long[]> out = new ArrayList<>();
        for (TensorSpec n : inputs.subList(2, inputs.size())) {
            out.add(Arrays.copyOf(n.sizes, n.sizes.length - 1));
        }
        return out;
    }

    public List<TensorSpec> inputs() {
        return inputs;
    }

    /** The program's parameter names ({@code model.} + state-dict name), in output order. */
    public List<String> parameterNames() {
        return parameterNames;
    }

    /** The shapes of {@link #parameterNames()}, in the same order. */
    public List<long[]> parameterShapes() {
        List<long[]> out = new ArrayList<>();
        for (long[] s : parameterShapes) {
            out.add(s.clone());
        }
        return out;
    }

    /** Index of the first gradient output: also the number of outputs a step hands back. */
    public int gradientsIndex() {
        return gradientsIndex;
    }

    public int parametersIndex() {
        return parametersIndex;
    }

    /**
     * Bytes of non-constant memory (activations, gradients, outputs) the runtime allocates when it
     * loads the method and its training metadata methods, for the batch bound: the sum of each
     * plan's {@code non_const_buffer_sizes} after index 0, which program.fbs reserves (ExecuTorch's
     * {@code MethodMeta::memory_planned_buffer_size(i)} is entry {@code i + 1};
     * {@code Module::load_method} allocates one buffer of each size). The weights come on top.
     */
    public long plannedBytes() {
        return plannedBytes;
    }

    /** Batch-norm layers the outputs report: loss, logits, then a mean and a variance each. */
    public int batchNormLayers() {
        return (gradientsIndex - 2) / 2;
    }

    /** A minimal flatbuffer reader: tables, vectors, strings and the unions program.fbs uses. */
    private static final class Flat {
        static final int PROGRAM_EXECUTION_PLAN = 1;
        static final int PLAN_NAME = 0;
        static final int PLAN_VALUES = 2;
        static final int PLAN_INPUTS = 3;
        static final int PLAN_OUTPUTS = 4;
        static final int PLAN_NON_CONST_BUFFER_SIZES = 8;
        // EValue { val: KernelTypes } -> field 0 is the union's type, field 1 its table.
        static final int EVALUE_TYPE = 0;
        static final int EVALUE_VALUE = 1;
        static final int KERNEL_INT = 2;
        static final int KERNEL_TENSOR = 5;
        static final int KERNEL_STRING = 6;
        static final int TENSOR_SCALAR_TYPE = 0;
        static final int TENSOR_SIZES = 2;
        /** More than any real tensor has (the protocol allows 32): a corrupt count is refused early. */
        static final int MAX_DIMS = 64;

        final ByteBuffer b;

        Flat(ByteBuffer pte) {
            b = pte.duplicate().order(ByteOrder.LITTLE_ENDIAN);
            b.position(0);
        }

        int root() {
            return offsetAt(0);
        }

        /** The absolute position a uoffset stored at {@code p} points to. */
        int offsetAt(int p) {
            long target = (long) p + Integer.toUnsignedLong(b.getInt(p));
            if (target >= b.limit()) {
                throw new IndexOutOfBoundsException("offset at " + p + " points past the end");
            }
            return (int) target;
        }

        /** The position of field {@code index} of the table at {@code table}, or -1 if absent. */
        int field(int table, int index) {
            int vtable = table - b.getInt(table);
            int vtableSize = b.getShort(vtable) & 0xffff;
            int slot = 4 + 2 * index;
            if (slot + 2 > vtableSize) {
                return -1;
            }
            int off = b.getShort(vtable + slot) & 0xffff;
            return off == 0 ? -1 : table + off;
        }

        /** Follows an offset field (table, vector, string); -1 if absent. */
        int ref(int table, int index) {
            int p = field(table, index);
            return p < 0 ? -1 : offsetAt(p);
        }

        int length(int vector) {
            if (vector < 0) {
                return 0;
            }
            int n = b.getInt(vector);
            if (n < 0 || (long) vector + 4 + n > b.limit()) {
                throw new IndexOutOfBoundsException("vector of " + n + " items at " + vector);
            }
            return n;
        }

        int intAt(int vector, int i) {
            checkIndex(vector, i);
            return b.getInt(vector + 4 + 4 * i);
        }

        int tableAt(int vector, int i) {
            checkIndex(vector, i);
            return offsetAt(vector + 4 + 4 * i);
        }

        private void checkIndex(int vector, int i) {
            if (i < 0 || i >= length(vector)) {
                throw new IndexOutOfBoundsException("item " + i + " of a vector of " + length(vector));
            }
        }

        String string(int s) {
            int n = length(s);
            byte[] bytes = new byte[n];
            for (int i = 0; i < n; i++) {
                bytes[i] = b.get(s + 4 + i);
            }
            return new String(bytes, StandardCharsets.UTF_8);
        }

        String ascii(int at, int n) {
            byte[] bytes = new byte[n];
            for (int i = 0; i < n; i++) {
                bytes[i] = b.get(at + i);
            }
            return new String(bytes, StandardCharsets.US_ASCII);
        }

        /** The execution plan (method) named {@code name}, or -1. */
        int plan(int program, String name) {
            int plans = ref(program, PROGRAM_EXECUTION_PLAN);
            for (int i = 0; i < length(plans); i++) {
                int plan = tableAt(plans, i);
                int n = ref(plan, PLAN_NAME);
                if (n >= 0 && name.equals(string(n))) {
                    return plan;
                }
            }
            return -1;
        }

        /** The EValue at {@code index} of a plan's values: its union type and table. */
        int[] value(int plan, int index) {
            int values = ref(plan, PLAN_VALUES);
            int evalue = tableAt(values, index);
            int typeAt = field(evalue, EVALUE_TYPE);
            int type = typeAt < 0 ? 0 : b.get(typeAt) & 0xff;
            return new int[] {type, ref(evalue, EVALUE_VALUE)};
        }

        TensorSpec tensorValue(int plan, int index) throws ProgramException {
            int[] v = value(plan, index);
            if (v[0] != KERNEL_TENSOR || v[1] < 0) {
                throw new ProgramException("value " + index + " is not a tensor (kernel type " + v[0] + ")");
            }
            int typeAt = field(v[1], TENSOR_SCALAR_TYPE);
            int scalarType = typeAt < 0 ? 0 : b.get(typeAt);
            int sizes = ref(v[1], TENSOR_SIZES);
            if (length(sizes) > MAX_DIMS) {
                throw new ProgramException("value " + index + " has " + length(sizes) + " dimensions");
            }
            long[] dims = new long[length(sizes)];
            for (int i = 0; i < dims.length; i++) {
                dims[i] = intAt(sizes, i);
            }
            return new TensorSpec(scalarType, dims);
        }

        /** The sum of a plan's non_const_buffer_sizes, entry 0 (reserved) left out. */
        long plannedBytes(int plan) throws ProgramException {
            int sizes = ref(plan, PLAN_NON_CONST_BUFFER_SIZES);
            long sum = 0;
            for (int i = 1; i < length(sizes); i++) {
                checkIndex(sizes, i);
                long size = b.getLong(sizes + 4 + 8 * i);
                if (size < 0) {
                    throw new ProgramException("planned buffer " + i + " has " + size + " bytes");
                }
                sum = Math.addExact(sum, size);
            }
            return sum;
        }

        /** The single Int output of a metadata method. */
        long intOutput(int plan) throws ProgramException {
            int outputs = ref(plan, PLAN_OUTPUTS);
            if (length(outputs) != 1) {
                throw new ProgramException("a training index method returns " + length(outputs) + " values");
            }
            int[] v = value(plan, intAt(outputs, 0));
            if (v[0] != KERNEL_INT) {
                throw new ProgramException("a training index method does not return an int");
            }
            int at = v[1] < 0 ? -1 : field(v[1], 0);
            long n = at < 0 ? 0 : b.getLong(at);
            if (n < 0 || n > Integer.MAX_VALUE) {
                throw new ProgramException("training index " + n + " out of range");
            }
            return n;
        }

        /** The String outputs of a metadata method, in order. */
        List<String> stringOutputs(int plan) throws ProgramException {
            int outputs = ref(plan, PLAN_OUTPUTS);
            List<String> out = new ArrayList<>();
            for (int i = 0; i < length(outputs); i++) {
                int[] v = value(plan, intAt(outputs, i));
                int s = v[1] < 0 ? -1 : ref(v[1], 0);
                if (v[0] != KERNEL_STRING || s < 0) {
                    throw new ProgramException("parameter name " + i + " is not a string");
                }
                out.add(string(s));
            }
            return out;
        }
    }
}
