"""A local, TensorFlow-Serving-compatible model server and its clients.

Serves any SavedModel directory in TF Serving's layout (`<base>/<version>/saved_model.pb`) over
the same REST and gRPC APIs as `tensorflow_model_server`, and needs no `keras_transformer` code:
what it serves, real TF Serving serves too. Modules:

* `flags` / `protos`: command-line flags and the text-proto config files.
* `servable` / `model_manager`: loading versions, polling for new ones, status.
* `json_tensor` / `examples`: the REST JSON formats, tf.Example requests.
* `prediction` / `batching`: running requests, dynamic batching.
* `rest` / `grpc_service` / `monitoring` / `server`: the APIs, metrics, process wiring.
* `client`: REST and gRPC clients with a `translate()` helper.
* `process`: `LocalServer`, the server as a child process on free ports (demo, tests, bench).
"""
