"""TensorFlow / Keras model zoo: one module per architecture, each registering its builder.

Modules here import only the registry at top level; keras and ``layers`` are imported
inside the builders, so listing models works without TensorFlow installed.

A TF builder takes ``num_classes`` and ``image_size`` (None: the registered size) and
returns an uncompiled Keras model that outputs logits, built in the layout
``keras.config.image_data_format()`` names (``layers.image_data_format``: NHWC by
default, NCHW for channels_first). Keras needs the input size when the model is built
(VGG and AlexNet flatten a fixed feature map).

Parameter counts follow the convention of the published figure each is held against:
``model.count_params()`` (trainable weights plus batch-norm moving statistics, Keras's
"Total params") for the models held against ``keras.applications`` figures (Inception-v3,
ResNet, VGG-16), and trainable weights only for those held against torchvision / timm
figures, which count ``parameters()`` and not batch-norm buffers.

Batch norm is ``layers.FusedBatchNormalization`` throughout: Keras's layer on TensorFlow's
fused kernel, which Keras 3 does not use.
"""
