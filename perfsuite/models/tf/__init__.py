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
"Total params") for ``keras.applications`` models, and trainable weights only for the
project's own definitions, which are held against torchvision / timm figures that count
``parameters()`` and not batch-norm buffers.
"""
