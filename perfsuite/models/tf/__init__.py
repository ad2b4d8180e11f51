"""TensorFlow / Keras model zoo: one module per architecture, each registering its builder.

The registry imports every module here but the shared building blocks (a module whose name
ends in ``layers``: ``layers``, ``transformer_layers``, ``moe_layers``, which import keras
themselves), so a new model is one module. A model module imports only the registry and the
catalog (perfsuite.models.catalog) at top level; keras, TensorFlow and the building blocks are
imported inside the builders, so listing models works without TensorFlow installed.

An image model's builder takes ``num_classes`` and ``image_size`` (None: the registered size)
and returns an uncompiled Keras model that outputs logits, built in the layout
``keras.config.image_data_format()`` names (``layers.image_data_format``: NHWC by default, NCHW
for channels_first). Keras needs the input size when the model is built (VGG and AlexNet
flatten a fixed feature map). A token model's builder takes ``vocab_size`` and ``seq_len`` and
returns a model from int32 ids ``[batch, seq]`` to logits ``[batch, seq, vocab]``
(``register_token_model``); the workload (perfsuite.workloads) says which arguments a builder
gets.

Parameter counts follow the convention of the published figure each is held against:
``model.count_params()`` (trainable weights plus batch-norm moving statistics, Keras's
"Total params") for the models held against ``keras.applications`` figures (Inception-v3,
ResNet, VGG-16), and trainable weights only for those held against torchvision / timm
figures, which count ``parameters()`` and not batch-norm buffers.

Where a model has batch norm (GoogLeNet, Inception-v3 and v4, the ResNets) it is
``layers.FusedBatchNormalization``: Keras's layer on TensorFlow's fused kernel, which Keras 3
does not use. AlexNet, VGG-16 and CIFAR-10's CNN have none; the transformers normalise with
layer norm or RMSNorm (``transformer_layers``).
"""
