/*
 * The message schema, written once (model: gsched/status.h's X-macro). The encoder
 * (proto/msg_encode.c), the decoder (msg_decode.c), the validator (msg_schema.c) and the test
 * samples and comparison (tests/proto/samples.c) are all derived from it: a message added here is
 * encoded, decoded, validated, round-tripped, truncated and fuzzed without further code.
 *
 * GS_MSG_TYPES(X): X(TYPE, name, max) for every message type GS_MSG_<TYPE> of proto/msg.h, with
 * its name for logs and the largest payload it may have in bytes (0: only the connection's frame
 * limit): the decoder refuses a longer one with GS_ERR_MSG_TOO_LARGE before it parses or
 * allocates anything (gsched counts them: msgs_oversized_total). Messages whose size grows with
 * the work (graphs, assignments, chunks, peer lists) have no cap of their own; their bounds are
 * the frame limits and the frame memory budget (proto/conn.h). The fields of TYPE are GS_MSG_FIELDS_<TYPE>(F), in wire order; the payload is the
 * msgpack array [type, field...], one element per entry. Each entry is
 *
 *     F(member, field, kind, count, per, rule)
 *
 *   member  the gs_msg_<member>_t struct (and gs_msg_t union member) holding the field
 *   field   the struct member; its name is also the name errors use
 *   kind    UINT   unsigned integer field (uint32_t or uint64_t)  -> msgpack uint (range-checked)
 *           INT    int32_t                                       -> msgpack int (range-checked)
 *           STR    gs_str_t, no NUL inside                        -> msgpack str
 *           BIN    gs_bytes_t                                     -> msgpack bin
 *           CHUNK  gs_bytes_t that gs_msg_encode_head() leaves to the caller and
 *                  gs_msg_decode_borrow() leaves in the payload  -> msgpack bin
 *           TAB    const T * of count * per entries of T (4 or 8 bytes) -> bin, little-endian
 *           CSR    const uint64_t * of count + 1 offsets, 0 first, never decreasing -> bin
 *           DTAB   like TAB, but dep_off[ntasks] * per entries (count names the CSR field)
 *           STRS   gs_str_t * of count entries (count: uint32_t, not sent) -> array of str
 *           BINS   gs_bytes_t * of count entries (likewise)        -> array of bin
 *           PEERS  gs_peer_info_t * of count entries (likewise)    -> array of [id, name, host, ucx]
 *   count   the field that sizes a TAB, CSR, STRS, BINS or PEERS field (it must come first on the
 *           wire unless it is an array's own count); the field itself otherwise
 *   per     entries per count unit (2 for (graph, task) key pairs), else 1
 *   rule    a validation rule beyond the kind's (gs__rule_*, proto/msg_schema.c), or GS__NO_RULE
 */
#ifndef GS_PROTO_MSG_SCHEMA_H
#define GS_PROTO_MSG_SCHEMA_H

#define GS_MSG_TYPES(X)                       \
    X(HELLO, "hello", 8192)                   \
    X(WELCOME, "welcome", 1024)               \
    X(WORKER_REGISTER, "worker-register", 0)  \
    X(HEARTBEAT, "heartbeat", 256)            \
    X(PEERS, "peers", 0)                      \
    X(GRAPH_SUBMIT, "graph-submit", 0)        \
    X(GRAPH_ACCEPTED, "graph-accepted", 256)  \
    X(TASK_ASSIGN, "task-assign", 0)          \
    X(TASK_DONE, "task-done", 0)              \
    X(RELEASE, "release", 0)                  \
    X(GATHER_REQ, "gather-req", 0)            \
    X(DATA, "data", 0)                        \
    X(FETCH_REQ, "fetch-req", 256)            \
    X(PROGRESS, "progress", 256)              \
    X(GRAPH_DONE, "graph-done", 1048576)      \
    X(CANCEL, "cancel", 64)                   \
    X(RELEASE_GRAPH, "release-graph", 64)     \
    X(ERROR, "error", 1048576)                \
    X(SHUTDOWN, "shutdown", 64)               \
    X(INFO_REQ, "info-req", 64)               \
    X(INFO, "info", 0)                        \
    X(BANDWIDTH, "bandwidth", 0)              \
    X(REPLICATE, "replicate", 0)              \
    X(REPLICATE_DONE, "replicate-done", 0)    \
    X(WORKERS_REQ, "workers-req", 64)         \
    X(WORKERS, "workers", 0)                  \
    X(CHALLENGE, "challenge", 256)            \
    X(AUTH, "auth", 256)                      \
    X(REPORT_REQ, "report-req", 64)           \
    X(REPORT, "report", 0)                    \
    X(LOCATE_REQ, "locate-req", 0)            \
    X(LOCATIONS, "locations", 0)              \
    X(CHUNK_REQ, "chunk-req", 1024)

#define GS_MSG_FIELDS_HELLO(F)                                   \
    F(hello, version, UINT, version, 1, GS__NO_RULE)             \
    F(hello, role, UINT, role, 1, gs__rule_peer_role)            \
    F(hello, token, STR, token, 1, GS__NO_RULE)                  \
    F(hello, name, STR, name, 1, GS__NO_RULE)                    \
    F(hello, nonce, BIN, nonce, 1, GS__NO_RULE)

#define GS_MSG_FIELDS_WELCOME(F)                                 \
    F(welcome, version, UINT, version, 1, GS__NO_RULE)           \
    F(welcome, id, UINT, id, 1, GS__NO_RULE)                     \
    F(welcome, heartbeat_ms, UINT, heartbeat_ms, 1, GS__NO_RULE) \
    F(welcome, data_key, BIN, data_key, 1, GS__NO_RULE)

#define GS_MSG_FIELDS_WORKER_REGISTER(F)                                         \
    F(worker_register, name, STR, name, 1, GS__NO_RULE)                          \
    F(worker_register, backend, STR, backend, 1, GS__NO_RULE)                    \
    F(worker_register, host, STR, host, 1, GS__NO_RULE)                          \
    F(worker_register, device, INT, device, 1, GS__NO_RULE)                      \
    F(worker_register, nthreads, UINT, nthreads, 1, GS__NO_RULE)                 \
    F(worker_register, pid, UINT, pid, 1, GS__NO_RULE)                           \
    F(worker_register, memory_limit, UINT, memory_limit, 1, GS__NO_RULE)         \
    F(worker_register, ucx_address, BIN, ucx_address, 1, GS__NO_RULE)          \
    F(worker_register, data_addr, STR, data_addr, 1, GS__NO_RULE)

#define GS_MSG_FIELDS_HEARTBEAT(F)                               \
    F(heartbeat, seq, UINT, seq, 1, GS__NO_RULE)                 \
    F(heartbeat, mem_used, UINT, mem_used, 1, GS__NO_RULE)       \
    F(heartbeat, mem_limit, UINT, mem_limit, 1, GS__NO_RULE)     \
    F(heartbeat, executing, UINT, executing, 1, GS__NO_RULE)     \
    F(heartbeat, queued, UINT, queued, 1, GS__NO_RULE)           \
    F(heartbeat, disk_used, UINT, disk_used, 1, GS__NO_RULE)     \
    F(heartbeat, disk_limit, UINT, disk_limit, 1, GS__NO_RULE)   \
    F(heartbeat, spilled_bytes, UINT, spilled_bytes, 1, GS__NO_RULE)     \
    F(heartbeat, spilled_ns, UINT, spilled_ns, 1, GS__NO_RULE)           \
    F(heartbeat, unspilled_bytes, UINT, unspilled_bytes, 1, GS__NO_RULE) \
    F(heartbeat, unspilled_ns, UINT, unspilled_ns, 1, GS__NO_RULE)           \
    F(heartbeat, host_used, UINT, host_used, 1, GS__NO_RULE)                 \
    F(heartbeat, host_limit, UINT, host_limit, 1, GS__NO_RULE)               \
    F(heartbeat, host_spilled_bytes, UINT, host_spilled_bytes, 1, GS__NO_RULE)     \
    F(heartbeat, host_spilled_ns, UINT, host_spilled_ns, 1, GS__NO_RULE)           \
    F(heartbeat, host_unspilled_bytes, UINT, host_unspilled_bytes, 1, GS__NO_RULE) \
    F(heartbeat, host_unspilled_ns, UINT, host_unspilled_ns, 1, GS__NO_RULE) \
    F(heartbeat, file_cpu_bytes, UINT, file_cpu_bytes, 1, GS__NO_RULE)       \
    F(heartbeat, file_pinned_bytes, UINT, file_pinned_bytes, 1, GS__NO_RULE) \
    F(heartbeat, file_cufile_bytes, UINT, file_cufile_bytes, 1, GS__NO_RULE) \
    F(heartbeat, file_compat_bytes, UINT, file_compat_bytes, 1, GS__NO_RULE)

#define GS_MSG_FIELDS_PEERS(F)                                   \
    F(peers, added, PEERS, nadded, 1, GS__NO_RULE)               \
    F(peers, nremoved, UINT, nremoved, 1, GS__NO_RULE)           \
    F(peers, removed, TAB, nremoved, 1, GS__NO_RULE)

#define GS_MSG_FIELDS_GRAPH_SUBMIT(F)                                        \
    F(graph_submit, client_ref, UINT, client_ref, 1, GS__NO_RULE)            \
    F(graph_submit, flags, UINT, flags, 1, GS__NO_RULE)                      \
    F(graph_submit, layers, BINS, nlayers, 1, GS__NO_RULE)                   \
    F(graph_submit, ntasks, UINT, ntasks, 1, GS__NO_RULE)                    \
    F(graph_submit, task_layer, TAB, ntasks, 1, gs__rule_layer_index)        \
    F(graph_submit, task_block, TAB, ntasks, 1, GS__NO_RULE)                 \
    F(graph_submit, dep_off, CSR, ntasks, 1, GS__NO_RULE)                    \
    F(graph_submit, deps, DTAB, dep_off, 1, GS__NO_RULE)                     \
    F(graph_submit, task_nbytes, TAB, ntasks, 1, GS__NO_RULE)                \
    F(graph_submit, nexternals, UINT, nexternals, 1, GS__NO_RULE)            \
    F(graph_submit, externals, TAB, nexternals, 2, GS__NO_RULE)              \
    F(graph_submit, noutputs, UINT, noutputs, 1, GS__NO_RULE)                \
    F(graph_submit, outputs, TAB, noutputs, 1, GS__NO_RULE)                  \
    F(graph_submit, layer_names, STRS, nlayer_names, 1, gs__rule_layer_names)

#define GS_MSG_FIELDS_GRAPH_ACCEPTED(F)                                  \
    F(graph_accepted, client_ref, UINT, client_ref, 1, GS__NO_RULE)      \
    F(graph_accepted, graph_id, UINT, graph_id, 1, GS__NO_RULE)

#define GS_MSG_FIELDS_TASK_ASSIGN(F)                                     \
    F(task_assign, graph_id, UINT, graph_id, 1, GS__NO_RULE)             \
    F(task_assign, layers, BINS, nlayers, 1, GS__NO_RULE)                \
    F(task_assign, layer_ids, TAB, nlayers, 1, GS__NO_RULE)              \
    F(task_assign, ntasks, UINT, ntasks, 1, GS__NO_RULE)                 \
    F(task_assign, task_id, TAB, ntasks, 1, GS__NO_RULE)                 \
    F(task_assign, task_layer, TAB, ntasks, 1, GS__NO_RULE)              \
    F(task_assign, task_block, TAB, ntasks, 1, GS__NO_RULE)              \
    F(task_assign, dep_off, CSR, ntasks, 1, GS__NO_RULE)                 \
    F(task_assign, dep_keys, DTAB, dep_off, 2, GS__NO_RULE)              \
    F(task_assign, dep_worker, DTAB, dep_off, 1, GS__NO_RULE)            \
    F(task_assign, dep_nbytes, DTAB, dep_off, 1, GS__NO_RULE)

#define GS_MSG_FIELDS_TASK_DONE(F)                                       \
    F(task_done, n, UINT, n, 1, GS__NO_RULE)                             \
    F(task_done, graph_id, TAB, n, 1, GS__NO_RULE)                       \
    F(task_done, task_id, TAB, n, 1, GS__NO_RULE)                        \
    F(task_done, status, TAB, n, 1, GS__NO_RULE)                         \
    F(task_done, nbytes, TAB, n, 1, GS__NO_RULE)                         \
    F(task_done, run_ns, TAB, n, 1, GS__NO_RULE)                         \
    F(task_done, fetch_ns, TAB, n, 1, GS__NO_RULE)                       \
    F(task_done, errors, STRS, nerrors, 1, gs__rule_one_error_per_failure) \
    F(task_done, now_ns, UINT, now_ns, 1, GS__NO_RULE)                   \
    F(task_done, start_ns, TAB, n, 1, GS__NO_RULE)                       \
    F(task_done, end_ns, TAB, n, 1, GS__NO_RULE)

#define GS_MSG_FIELDS_RELEASE(F)                                 \
    F(release, n, UINT, n, 1, GS__NO_RULE)                       \
    F(release, keys, TAB, n, 2, GS__NO_RULE)

#define GS_MSG_FIELDS_GATHER_REQ(F)                              \
    F(gather_req, req_id, UINT, req_id, 1, GS__NO_RULE)          \
    F(gather_req, n, UINT, n, 1, GS__NO_RULE)                    \
    F(gather_req, keys, TAB, n, 2, GS__NO_RULE)

#define GS_MSG_FIELDS_DATA(F)                                    \
    F(data, req_id, UINT, req_id, 1, GS__NO_RULE)                \
    F(data, graph_id, UINT, graph_id, 1, GS__NO_RULE)            \
    F(data, task_id, UINT, task_id, 1, GS__NO_RULE)              \
    F(data, status, INT, status, 1, GS__NO_RULE)                 \
    F(data, data, CHUNK, data, 1, GS__NO_RULE)

#define GS_MSG_FIELDS_FETCH_REQ(F)                                       \
    F(fetch_req, req_id, UINT, req_id, 1, GS__NO_RULE)                   \
    F(fetch_req, graph_id, UINT, graph_id, 1, GS__NO_RULE)               \
    F(fetch_req, task_id, UINT, task_id, 1, GS__NO_RULE)                 \
    F(fetch_req, from_worker, UINT, from_worker, 1, GS__NO_RULE)

#define GS_MSG_FIELDS_PROGRESS(F)                                \
    F(progress, graph_id, UINT, graph_id, 1, GS__NO_RULE)        \
    F(progress, done, UINT, done, 1, GS__NO_RULE)                \
    F(progress, total, UINT, total, 1, GS__NO_RULE)

#define GS_MSG_FIELDS_GRAPH_DONE(F)                                      \
    F(graph_done, graph_id, UINT, graph_id, 1, GS__NO_RULE)              \
    F(graph_done, status, INT, status, 1, GS__NO_RULE)                   \
    F(graph_done, message, STR, message, 1, GS__NO_RULE)                 \
    F(graph_done, ntasks, UINT, ntasks, 1, GS__NO_RULE)                  \
    F(graph_done, run_ns_total, UINT, run_ns_total, 1, GS__NO_RULE)      \
    F(graph_done, wall_ns, UINT, wall_ns, 1, GS__NO_RULE)

#define GS_MSG_FIELDS_CANCEL(F) F(cancel, graph_id, UINT, graph_id, 1, GS__NO_RULE)
#define GS_MSG_FIELDS_RELEASE_GRAPH(F) GS_MSG_FIELDS_CANCEL(F)

#define GS_MSG_FIELDS_ERROR(F)                                   \
    F(error, status, INT, status, 1, GS__NO_RULE)                \
    F(error, message, STR, message, 1, GS__NO_RULE)

#define GS_MSG_FIELDS_SHUTDOWN(F)
#define GS_MSG_FIELDS_INFO_REQ(F)
#define GS_MSG_FIELDS_WORKERS_REQ(F)

#define GS_MSG_FIELDS_INFO(F)                                            \
    F(info, nworkers, UINT, nworkers, 1, GS__NO_RULE)                    \
    F(info, nclients, UINT, nclients, 1, GS__NO_RULE)                    \
    F(info, ngraphs_active, UINT, ngraphs_active, 1, GS__NO_RULE)        \
    F(info, tasks_done_total, UINT, tasks_done_total, 1, GS__NO_RULE)    \
    F(info, worker_names, STRS, nnames, 1, GS__NO_RULE)

#define GS_MSG_FIELDS_BANDWIDTH(F)                                       \
    F(bandwidth, n, UINT, n, 1, GS__NO_RULE)                             \
    F(bandwidth, peer, TAB, n, 1, GS__NO_RULE)                           \
    F(bandwidth, bytes, TAB, n, 1, GS__NO_RULE)                          \
    F(bandwidth, ns, TAB, n, 1, GS__NO_RULE)                             \
    F(bandwidth, count, TAB, n, 1, GS__NO_RULE)                          \
    F(bandwidth, path, STRS, npaths, 1, gs__rule_one_per_entry)

#define GS_MSG_FIELDS_REPLICATE(F)                                       \
    F(replicate, req_id, UINT, req_id, 1, GS__NO_RULE)                   \
    F(replicate, worker_id, UINT, worker_id, 1, GS__NO_RULE)             \
    F(replicate, worker_name, STR, worker_name, 1, GS__NO_RULE)          \
    F(replicate, n, UINT, n, 1, GS__NO_RULE)                             \
    F(replicate, keys, TAB, n, 2, GS__NO_RULE)                           \
    F(replicate, nsrc, UINT, nsrc, 1, gs__rule_none_or_one_per_key)      \
    F(replicate, from, TAB, nsrc, 1, GS__NO_RULE)                        \
    F(replicate, nbytes, TAB, nsrc, 1, GS__NO_RULE)

#define GS_MSG_FIELDS_REPLICATE_DONE(F)                                  \
    F(replicate_done, req_id, UINT, req_id, 1, GS__NO_RULE)              \
    F(replicate_done, status, INT, status, 1, GS__NO_RULE)               \
    F(replicate_done, message, STR, message, 1, GS__NO_RULE)             \
    F(replicate_done, n, UINT, n, 1, GS__NO_RULE)                        \
    F(replicate_done, keys, TAB, n, 2, GS__NO_RULE)                      \
    F(replicate_done, nbytes, TAB, n, 1, GS__NO_RULE)

#define GS_MSG_FIELDS_WORKERS(F)                                         \
    F(workers, n, UINT, n, 1, GS__NO_RULE)                               \
    F(workers, id, TAB, n, 1, GS__NO_RULE)                               \
    F(workers, device, TAB, n, 1, GS__NO_RULE)                           \
    F(workers, nthreads, TAB, n, 1, GS__NO_RULE)                         \
    F(workers, memory_limit, TAB, n, 1, GS__NO_RULE)                     \
    F(workers, mem_used, TAB, n, 1, GS__NO_RULE)                         \
    F(workers, name, STRS, nname, 1, gs__rule_one_per_entry)             \
    F(workers, host, STRS, nhost, 1, gs__rule_one_per_entry)             \
    F(workers, backend, STRS, nbackend, 1, gs__rule_one_per_entry)       \
    F(workers, addr, STRS, naddr, 1, gs__rule_one_per_entry)           \
    F(workers, disk_used, TAB, n, 1, GS__NO_RULE)                        \
    F(workers, spilled_bytes, TAB, n, 1, GS__NO_RULE)                    \
    F(workers, spilled_ns, TAB, n, 1, GS__NO_RULE)                       \
    F(workers, unspilled_bytes, TAB, n, 1, GS__NO_RULE)                  \
    F(workers, unspilled_ns, TAB, n, 1, GS__NO_RULE)                     \
    F(workers, host_used, TAB, n, 1, GS__NO_RULE)                        \
    F(workers, host_spilled_bytes, TAB, n, 1, GS__NO_RULE)               \
    F(workers, host_spilled_ns, TAB, n, 1, GS__NO_RULE)                  \
    F(workers, host_unspilled_bytes, TAB, n, 1, GS__NO_RULE)             \
    F(workers, host_unspilled_ns, TAB, n, 1, GS__NO_RULE)                \
    F(workers, file_cpu_bytes, TAB, n, 1, GS__NO_RULE)                   \
    F(workers, file_pinned_bytes, TAB, n, 1, GS__NO_RULE)                \
    F(workers, file_cufile_bytes, TAB, n, 1, GS__NO_RULE)                \
    F(workers, file_compat_bytes, TAB, n, 1, GS__NO_RULE)

/* the registration handshake (common/auth.h): gsched's nonce and proof, then the peer's proof */
#define GS_MSG_FIELDS_CHALLENGE(F)                                       \
    F(challenge, nonce, BIN, nonce, 1, GS__NO_RULE)              \
    F(challenge, proof, BIN, proof, 1, GS__NO_RULE)

#define GS_MSG_FIELDS_AUTH(F) F(auth, proof, BIN, proof, 1, GS__NO_RULE)

#define GS_MSG_FIELDS_REPORT_REQ(F)                                      \
    F(report_req, req_id, UINT, req_id, 1, GS__NO_RULE)                  \
    F(report_req, graph_id, UINT, graph_id, 1, GS__NO_RULE)

#define GS_MSG_FIELDS_REPORT(F)                                          \
    F(report, req_id, UINT, req_id, 1, GS__NO_RULE)                      \
    F(report, status, INT, status, 1, GS__NO_RULE)                       \
    F(report, message, STR, message, 1, GS__NO_RULE)                     \
    F(report, html, BIN, html, 1, GS__NO_RULE)

/* direct gathers (client/gather_direct.c, worker/direct.c, scheduler/gather.c): the client asks
 * gsched where its output chunks are (LOCATE_REQ, keys as GATHER_REQ's); LOCATIONS answers per
 * key with its size, the holding worker's data address ("host:port", empty: not reachable
 * directly, use GATHER_REQ) and host name, and a ticket (HMAC-SHA256 under the data-plane key of
 * the key and the client's id, 4 x u64); the client presents the ticket to the worker's data
 * port in CHUNK_REQ and gets DATA (bytes inline, or written into the client's shared-memory
 * region shm at shm_off when shm is not empty) */
#define GS_MSG_FIELDS_LOCATE_REQ(F)                              \
    F(locate_req, req_id, UINT, req_id, 1, GS__NO_RULE)          \
    F(locate_req, n, UINT, n, 1, GS__NO_RULE)                    \
    F(locate_req, keys, TAB, n, 2, GS__NO_RULE)

#define GS_MSG_FIELDS_LOCATIONS(F)                                       \
    F(locations, req_id, UINT, req_id, 1, GS__NO_RULE)                   \
    F(locations, n, UINT, n, 1, GS__NO_RULE)                             \
    F(locations, keys, TAB, n, 2, GS__NO_RULE)                           \
    F(locations, nbytes, TAB, n, 1, GS__NO_RULE)                         \
    F(locations, ticket, TAB, n, 4, GS__NO_RULE)                         \
    F(locations, addr, STRS, naddr, 1, gs__rule_one_per_entry)           \
    F(locations, host, STRS, nhost, 1, gs__rule_one_per_entry)

#define GS_MSG_FIELDS_CHUNK_REQ(F)                                       \
    F(chunk_req, req_id, UINT, req_id, 1, GS__NO_RULE)                   \
    F(chunk_req, graph_id, UINT, graph_id, 1, GS__NO_RULE)               \
    F(chunk_req, task_id, UINT, task_id, 1, GS__NO_RULE)                 \
    F(chunk_req, client_id, UINT, client_id, 1, GS__NO_RULE)             \
    F(chunk_req, ticket, BIN, ticket, 1, GS__NO_RULE)                    \
    F(chunk_req, shm, STR, shm, 1, GS__NO_RULE)                          \
    F(chunk_req, shm_off, UINT, shm_off, 1, GS__NO_RULE)

#endif
