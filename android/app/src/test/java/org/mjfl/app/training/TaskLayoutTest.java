package org.mjfl.app.training;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import org.junit.jupiter.api.Test;
import org.mjfl.app.training.TaskLayout.Entry;
import org.mjfl.app.training.TaskLayout.Kind;

class TaskLayoutTest {
    private static final ProgramSignature.TensorSpec X =
            new ProgramSignature.TensorSpec(ProgramSignature.SCALAR_FLOAT, new long[] {8, 1, 4, 4});
    private static final ProgramSignature.TensorSpec Y =
            new ProgramSignature.TensorSpec(ProgramSignature.SCALAR_LONG, new long[] {8});

    /** A program with a convolution, one batch norm and a linear layer, like the zoo's nets. */
    static ProgramSignature convBnLinear() throws ProgramException {
        return ProgramSignature.of(List.of(X, Y),
                List.of("model.conv.weight", "model.bn.weight", "model.bn.bias", "model.fc.weight", "model.fc.bias"),
                List.of(new long[] {3, 1, 3, 3}, new long[] {3}, new long[] {3}, new long[] {2, 12}, new long[] {2}),
                4);
    }

    /** Its state dict, in state-dict order. */
    static List<Entry> stateDict() {
        return List.of(
                new Entry("conv.weight", Kind.FLOAT32, new long[] {3, 1, 3, 3}),
                new Entry("bn.weight", Kind.FLOAT32, new long[] {3}),
                new Entry("bn.bias", Kind.FLOAT32, new long[] {3}),
                new Entry("bn.running_mean", Kind.FLOAT32, new long[] {3}),
                new Entry("bn.running_var", Kind.FLOAT32, new long[] {3}),
                new Entry("bn.num_batches_tracked", Kind.FLOAT32, new long[] {}),
                new Entry("fc.weight", Kind.FLOAT32, new long[] {2, 12}),
                new Entry("fc.bias", Kind.FLOAT32, new long[] {2}));
    }

    @Test
    void programNamesAreTheStateDictNamesWithTheModelPrefix() throws Exception {
        TaskLayout layout = TaskLayout.of(stateDict(), convBnLinear(), new long[] {16});
        assertEquals("model.conv.weight", layout.programName(0));
        assertEquals("model.bn.bias", layout.programName(2));
        assertNull(layout.programName(3));
        assertNull(layout.programName(5));
        assertEquals("model.fc.bias", layout.programName(7));
        TaskLayout.BatchNormLayer bn = layout.batchNormLayers().get(0);
        assertEquals(new TaskLayout.BatchNormLayer("bn", 3, 4, 5, 3, 16), bn);
    }

    @Test
    void batchNormLayersComeInStateDictOrder() throws Exception {
        ProgramSignature twoBn = ProgramSignature.of(List.of(X, Y), List.of("model.w"), List.of(new long[] {1}), 6);
        List<Entry> task = List.of(
                new Entry("w", Kind.FLOAT32, new long[] {1}),
                new Entry("b.running_mean", Kind.FLOAT32, new long[] {2}),
                new Entry("b.running_var", Kind.FLOAT32, new long[] {2}),
                new Entry("a.running_mean", Kind.FLOAT32, new long[] {5}),
                new Entry("a.running_var", Kind.FLOAT32, new long[] {5}),
                new Entry("a.num_batches_tracked", Kind.INT64, new long[] {}));
        TaskLayout layout = TaskLayout.of(task, twoBn, new long[] {9, 4});
        assertEquals("b", layout.batchNormLayers().get(0).prefix());
        assertEquals(-1, layout.batchNormLayers().get(0).tracked());
        assertEquals(9, layout.batchNormLayers().get(0).pixels());
        assertEquals("a", layout.batchNormLayers().get(1).prefix());
        assertEquals(5, layout.batchNormLayers().get(1).channels());
    }

    @Test
    void refusesTasksThatDoNotFitTheProgram() throws Exception {
        ProgramSignature p = convBnLinear();
        List<Entry> good = stateDict();
        // a parameter missing
        assertThrows(ProgramException.class, () -> TaskLayout.of(good.subList(0, 7), p, new long[] {16}));
        // a parameter in another shape
        List<Entry> reshaped = new java.util.ArrayList<>(good);
        reshaped.set(6, new Entry("fc.weight", Kind.FLOAT32, new long[] {12, 2}));
        assertThrows(ProgramException.class, () -> TaskLayout.of(reshaped, p, new long[] {16}));
        // a tensor that is neither a parameter nor a batch-norm buffer
        List<Entry> extra = new java.util.ArrayList<>(good);
        extra.add(new Entry("fc.scale", Kind.FLOAT32, new long[] {1}));
        assertThrows(ProgramException.class, () -> TaskLayout.of(extra, p, new long[] {16}));
        // batch_norm_pixels of another length than the layers
        assertThrows(ProgramException.class, () -> TaskLayout.of(good, p, new long[] {}));
        assertThrows(ProgramException.class, () -> TaskLayout.of(good, p, new long[] {16, 4}));
        // a layer without running_var
        List<Entry> noVar = new java.util.ArrayList<>(good);
        noVar.remove(4);
        assertThrows(ProgramException.class, () -> TaskLayout.of(noVar, p, new long[] {16}));
        // a program whose outputs report no batch norm although the task has a layer
        ProgramSignature noBn = ProgramSignature.of(List.of(X, Y), p.parameterNames(), p.parameterShapes(), 2);
        ProgramException e = assertThrows(ProgramException.class, () -> TaskLayout.of(good, noBn, new long[] {16}));
        assertTrue(e.getMessage().contains("batch-norm"), e.getMessage());
        // a name twice
        List<Entry> twice = new java.util.ArrayList<>(good);
        twice.add(good.get(0));
        assertThrows(ProgramException.class, () -> TaskLayout.of(twice, p, new long[] {16}));
    }
}
