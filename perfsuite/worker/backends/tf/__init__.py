"""TensorFlow backend: one worker process drives every device of a node through a
tf.distribute strategy. Modules here import TensorFlow at top level; only the worker
process imports them."""
