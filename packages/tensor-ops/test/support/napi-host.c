/*
 * A minimal Node-API host, for prebuilds whose Node cannot run here (linux-x64 musl): built with
 * the target's libc (musl-gcc), it dlopens the addon as Node would (RTLD_NOW, the Node-API functions
 * exported by this executable, -rdynamic), registers the module, and calls its methods:
 *
 *   napi-host ADDON isa                                    prints the ISA name
 *   napi-host ADDON convert ISA TYPE NBLOCKS NOUT IN OUT   setIsa(ISA), toF32(TYPE, IN, f32[NOUT], NBLOCKS) into OUT
 *
 * Only the handful of functions tensor_ops.c calls exist; anything else fails to link at dlopen.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <node_api.h>

struct napi_env__ { int unused; };
enum kind { K_UNDEF, K_NUMBER, K_BOOL, K_STRING, K_TYPED, K_OBJECT, K_ARRAY };
struct napi_value__ {
    enum kind kind;
    double number;
    char text[64];
    napi_typedarray_type ta_type;
    void *data;
    size_t length; /* elements */
};
struct napi_callback_info__ { size_t argc; napi_value *argv; };

static struct napi_env__ the_env;
static napi_property_descriptor methods[16];
static size_t n_methods;

static napi_value make(enum kind kind) {
    napi_value v = calloc(1, sizeof *v);
    v->kind = kind;
    return v;
}

static void fail(const char *what, const char *msg) {
    fprintf(stderr, "napi-host: addon threw (%s): %s\n", what, msg ? msg : "");
    exit(3);
}

napi_status napi_get_cb_info(napi_env env, napi_callback_info info, size_t *argc, napi_value *argv, napi_value *this_arg, void **data) {
    (void) env;
    for (size_t i = 0; argv && i < *argc; i++) argv[i] = i < info->argc ? info->argv[i] : make(K_UNDEF);
    *argc = info->argc;
    if (this_arg) *this_arg = make(K_OBJECT);
    if (data) *data = NULL;
    return napi_ok;
}
napi_status napi_get_value_int32(napi_env env, napi_value v, int32_t *out) {
    (void) env;
    if (v->kind != K_NUMBER) return napi_number_expected;
    *out = (int32_t) v->number;
    return napi_ok;
}
napi_status napi_get_value_double(napi_env env, napi_value v, double *out) {
    (void) env;
    if (v->kind != K_NUMBER) return napi_number_expected;
    *out = v->number;
    return napi_ok;
}
napi_status napi_get_value_string_utf8(napi_env env, napi_value v, char *buf, size_t size, size_t *len) {
    (void) env;
    if (v->kind != K_STRING) return napi_string_expected;
    size_t n = strlen(v->text);
    if (buf && size > 0) {
        if (n >= size) n = size - 1;
        memcpy(buf, v->text, n);
        buf[n] = 0;
    }
    if (len) *len = n;
    return napi_ok;
}
napi_status napi_get_typedarray_info(napi_env env, napi_value v, napi_typedarray_type *type, size_t *length, void **data, napi_value *buffer, size_t *offset) {
    (void) env;
    if (v->kind != K_TYPED) return napi_invalid_arg;
    if (type) *type = v->ta_type;
    if (length) *length = v->length;
    if (data) *data = v->data;
    if (buffer) *buffer = make(K_OBJECT);
    if (offset) *offset = 0;
    return napi_ok;
}
napi_status napi_get_boolean(napi_env env, bool b, napi_value *out) {
    (void) env;
    *out = make(K_BOOL);
    (*out)->number = b;
    return napi_ok;
}
napi_status napi_create_double(napi_env env, double d, napi_value *out) {
    (void) env;
    *out = make(K_NUMBER);
    (*out)->number = d;
    return napi_ok;
}
napi_status napi_create_int32(napi_env env, int32_t i, napi_value *out) { return napi_create_double(env, i, out); }
napi_status napi_create_string_utf8(napi_env env, const char *s, size_t len, napi_value *out) {
    (void) env;
    *out = make(K_STRING);
    if (len == NAPI_AUTO_LENGTH) len = strlen(s);
    if (len >= sizeof (*out)->text) len = sizeof (*out)->text - 1;
    memcpy((*out)->text, s, len);
    return napi_ok;
}
napi_status napi_create_array_with_length(napi_env env, size_t n, napi_value *out) {
    (void) env;
    *out = make(K_ARRAY);
    (*out)->length = n;
    return napi_ok;
}
napi_status napi_set_element(napi_env env, napi_value arr, uint32_t i, napi_value v) { (void) env; (void) arr; (void) i; (void) v; return napi_ok; }
napi_status napi_define_properties(napi_env env, napi_value obj, size_t n, const napi_property_descriptor *props) {
    (void) env;
    (void) obj;
    for (size_t i = 0; i < n && n_methods < 16; i++) methods[n_methods++] = props[i];
    return napi_ok;
}
/* copyFileRangeAsync's calls: bound at load (RTLD_NOW), never run by this host (it has no event loop) */
napi_status napi_create_error(napi_env env, napi_value code, napi_value msg, napi_value *out) { (void) env; (void) code; (void) msg; *out = make(K_STRING); return napi_ok; }
napi_status napi_create_promise(napi_env env, napi_deferred *deferred, napi_value *promise) { (void) env; (void) deferred; (void) promise; return napi_generic_failure; }
napi_status napi_resolve_deferred(napi_env env, napi_deferred deferred, napi_value v) { (void) env; (void) deferred; (void) v; return napi_generic_failure; }
napi_status napi_reject_deferred(napi_env env, napi_deferred deferred, napi_value v) { (void) env; (void) deferred; (void) v; return napi_generic_failure; }
napi_status napi_create_async_work(napi_env env, napi_value r, napi_value n, napi_async_execute_callback e, napi_async_complete_callback c, void *d, napi_async_work *w) {
    (void) env; (void) r; (void) n; (void) e; (void) c; (void) d; (void) w;
    return napi_generic_failure;
}
napi_status napi_queue_async_work(napi_env env, napi_async_work w) { (void) env; (void) w; return napi_generic_failure; }
napi_status napi_delete_async_work(napi_env env, napi_async_work w) { (void) env; (void) w; return napi_generic_failure; }
/* largeBuffer's calls: bound at load, never run by this host (the kernels take the caller's arrays) */
napi_status napi_create_external_arraybuffer(napi_env env, void *data, size_t n, napi_finalize f, void *hint, napi_value *out) {
    (void) env; (void) data; (void) n; (void) f; (void) hint; (void) out;
    return napi_generic_failure;
}
napi_status napi_get_null(napi_env env, napi_value *out) { (void) env; (void) out; return napi_generic_failure; }
napi_status napi_adjust_external_memory(napi_env env, int64_t change, int64_t *total) { (void) env; (void) change; (void) total; return napi_generic_failure; }
napi_status napi_throw_error(napi_env env, const char *code, const char *msg) { (void) env; fail(code ? code : "Error", msg); return napi_ok; }
napi_status napi_throw_type_error(napi_env env, const char *code, const char *msg) { (void) env; (void) code; fail("TypeError", msg); return napi_ok; }
napi_status napi_throw_range_error(napi_env env, const char *code, const char *msg) { (void) env; (void) code; fail("RangeError", msg); return napi_ok; }

static napi_value call(const char *name, size_t argc, napi_value *argv) {
    for (size_t i = 0; i < n_methods; i++) {
        if (methods[i].utf8name && strcmp(methods[i].utf8name, name) == 0) {
            struct napi_callback_info__ info = {argc, argv};
            return methods[i].method(&the_env, &info);
        }
    }
    fprintf(stderr, "napi-host: the addon has no method %s\n", name);
    exit(2);
}

static napi_value number(double d) { napi_value v; napi_create_double(&the_env, d, &v); return v; }
static napi_value string(const char *s) { napi_value v; napi_create_string_utf8(&the_env, s, NAPI_AUTO_LENGTH, &v); return v; }

static void *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) { perror(path); exit(2); }
    fseek(f, 0, SEEK_END);
    *size = (size_t) ftell(f);
    fseek(f, 0, SEEK_SET);
    void *buf = malloc(*size ? *size : 1);
    if (fread(buf, 1, *size, f) != *size) { perror(path); exit(2); }
    fclose(f);
    return buf;
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: napi-host ADDON isa | convert ISA TYPE NBLOCKS NOUT IN OUT\n"); return 2; }
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) { fprintf(stderr, "napi-host: dlopen: %s\n", dlerror()); return 1; }
    napi_value (*reg)(napi_env, napi_value) = (napi_value (*)(napi_env, napi_value)) dlsym(lib, "napi_register_module_v1");
    if (!reg) { fprintf(stderr, "napi-host: no napi_register_module_v1\n"); return 1; }
    reg(&the_env, make(K_OBJECT));
    if (strcmp(argv[2], "isa") == 0) {
        printf("%s\n", call("isa", 0, NULL)->text);
        return 0;
    }
    if (strcmp(argv[2], "convert") == 0 && argc == 9) {
        napi_value isa_arg[1] = {string(argv[3])};
        call("setIsa", 1, isa_arg);
        size_t in_size;
        void *in = read_file(argv[7], &in_size);
        const size_t n_out = (size_t) strtoull(argv[6], NULL, 10);
        float *out = calloc(n_out ? n_out : 1, sizeof(float));
        napi_value src = make(K_TYPED), dst = make(K_TYPED);
        src->ta_type = napi_uint8_array, src->data = in, src->length = in_size;
        dst->ta_type = napi_float32_array, dst->data = out, dst->length = n_out;
        napi_value args[4] = {number(atof(argv[4])), src, dst, number(atof(argv[5]))};
        if (call("toF32", 4, args)->number != 1) { fprintf(stderr, "napi-host: no kernel for type %s\n", argv[4]); return 1; }
        FILE *f = fopen(argv[8], "wb");
        if (!f || fwrite(out, sizeof(float), n_out, f) != n_out || fclose(f) != 0) { perror(argv[8]); return 2; }
        printf("%s\n", call("isa", 0, NULL)->text);
        return 0;
    }
    fprintf(stderr, "napi-host: bad arguments\n");
    return 2;
}
