package org.mjfl.client.train;

import java.util.List;
import org.mjfl.client.protocol.Tensor;

/**
 * What training produced (protocol.md 5.5).
 *
 * @param weights the trained weights: the task's names, dtypes and shapes, in its order
 * @param samples samples trained on per epoch
 * @param meanLoss mean training loss of the last epoch
 * @param computeS local training time: first batch to final weights, seconds
 */
public record TrainingResult(List<Tensor> weights, long samples, double meanLoss, double computeS) {}
