/* test_dgemma.c — DiffusionGemma without golden data:
 *   config      the published config.json (text_config keys of
 *               google/diffusiongemma-26B-A4B-it) parses to the preset's
 *               shape; settings computed otherwise are refused naming the
 *               file and field
 *   loader      the tiny preset written in the published layout loads back
 *               equal; a missing tensor, a wrong shape, a v_proj in a full
 *               layer, a missing encoder layer_scalar are refused naming the
 *               file and tensor
 *   forward     a prompt encoded in chunks equals it encoded whole; the
 *               canvas pass leaves the cache as it was
 *   sampler     the temperature schedule, entropy-bound acceptance,
 *               renoising, the noise stream's range and law, the stop rule
 *               (stable and confident, the step cap, stability 0), EOS
 *               padding, the encoder passes between canvases, on hand-made
 *               logits through a scripted engine. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "dgemma_cpu.h"
#include "dgemma_forward.h"
#include "dgemma_model.h"
#include "dgemma_sampler.h"

/* ------------------------------------------------------------ config */

/* google/diffusiongemma-26B-A4B-it's text_config keys and values (research
 * note section 1), the vision_config cut to its type */
static const char *published =
    "{\"architectures\": [\"DiffusionGemmaForBlockDiffusion\"], \"model_type\": \"diffusion_gemma\","
    " \"canvas_length\": 256, \"tie_word_embeddings\": true, \"eos_token_id\": [1, 106, 50],"
    " \"image_token_id\": 258880, \"boi_token_id\": 255999, \"eoi_token_id\": 258882,"
    " \"vision_soft_tokens_per_image\": 280, \"vision_config\": {\"model_type\": \"gemma4_vision\"},"
    " \"dtype\": \"bfloat16\", \"text_config\": {\"model_type\": \"diffusion_gemma_text\", \"vocab_size\": 262144,"
    " \"hidden_size\": 2816, \"num_hidden_layers\": 30,"
    " \"layer_types\": [%s], \"num_attention_heads\": 16, \"num_key_value_heads\": 8, \"head_dim\": 256,"
    " \"num_global_key_value_heads\": 2, \"global_head_dim\": 512, \"sliding_window\": 1024,"
    " \"rope_parameters\": {\"sliding_attention\": {\"rope_type\": \"default\", \"rope_theta\": 10000.0},"
    " \"full_attention\": {\"rope_type\": \"proportional\", \"partial_rotary_factor\": 0.25, \"rope_theta\": 1000000.0}},"
    " \"intermediate_size\": 2112, \"num_experts\": 128, \"top_k_experts\": 8, \"moe_intermediate_size\": 704,"
    " \"hidden_activation\": \"gelu_pytorch_tanh\", \"rms_norm_eps\": 1e-06, \"final_logit_softcapping\": 30.0,"
    " \"max_position_embeddings\": 262144, \"use_bidirectional_attention\": \"vision\", \"attention_bias\": false,"
    " \"pad_token_id\": 0, \"bos_token_id\": 2, \"eos_token_id\": 1, \"dtype\": \"bfloat16\"%s}}";

static char *published_json(const char *extra)
{
    char types[2048] = "";
    for (int l = 0; l < 30; l++)
        snprintf(types + strlen(types), sizeof types - strlen(types), "%s\"%s\"", l ? ", " : "",
                 (l + 1) % 6 ? "sliding_attention" : "full_attention");
    char *s = NULL;
    if (asprintf(&s, published, types, extra) < 0)
        abort();
    return s;
}

/* the published config with `from` replaced by `to` (first occurrence) */
static int parse_edit(const char *from, const char *to, tb_dgemma_config *cfg, char *err, size_t n)
{
    char *j = published_json("");
    char *at = strstr(j, from);
    if (!at) {
        fprintf(stderr, "edit: \"%s\" not in the published config\n", from);
        abort();
    }
    char *e = NULL;
    if (asprintf(&e, "%.*s%s%s", (int)(at - j), j, to, at + strlen(from)) < 0)
        abort();
    int rc = tb_dgemma_config_parse(e, "dg/config.json", cfg, err, n);
    free(j), free(e);
    return rc;
}

static void test_config(void)
{
    tb_dgemma_config c, p;
    char err[512];
    char *j = published_json("");
    CHECK(tb_dgemma_is_config(j));
    CHECK(tb_dgemma_config_parse(j, "dg/config.json", &c, err, sizeof err) == 0);
    free(j);
    CHECK(tb_dgemma_preset_config("diffusiongemma-26b-a4b", &p, err, sizeof err) == 0);
    /* the preset is the published shape, field by field */
    CHECK(c.vocab == p.vocab && c.hidden == p.hidden && c.n_layers == p.n_layers && c.n_heads == p.n_heads);
    CHECK(c.inter == p.inter && c.kv_sliding == p.kv_sliding && c.hd_sliding == p.hd_sliding);
    CHECK(c.kv_full == 2 && p.kv_full == 2 && c.hd_full == 512 && p.hd_full == 512);
    CHECK(c.n_experts == p.n_experts && c.top_k == p.top_k && c.moe_inter == p.moe_inter);
    CHECK(c.sliding_window == 1024 && p.sliding_window == 1024 && c.canvas == 256 && p.canvas == 256);
    CHECK(c.rope_angles_full == 64 && p.rope_angles_full == 64);
    CHECK(c.theta_full == p.theta_full && c.theta_sliding == p.theta_sliding && c.softcap == p.softcap);
    CHECK(memcmp(c.full, p.full, sizeof c.full) == 0);
    CHECK(c.full[5] && c.full[29] && !c.full[0] && !c.full[28]);
    CHECK(c.n_eos == 3 && c.eos[0] == 1 && c.eos[1] == 106 && c.eos[2] == 50);
    CHECK(c.bf16 && p.bf16 && c.pad_id == 0 && c.image_id == 258880 && p.image_id == 258880);
    CHECK(tb_dgemma_n_params(&c) > 24000000000LL && tb_dgemma_n_params(&c) < 27000000000LL);
    CHECK(tb_dgemma_n_active(&c) > 3000000000LL && tb_dgemma_n_active(&c) < 4500000000LL);
    fprintf(stderr, "published shape: %.2fB parameters, %.2fB active\n", tb_dgemma_n_params(&c) / 1e9,
            tb_dgemma_n_active(&c) / 1e9);

    /* the last layer is forced to full attention, as transformers does */
    CHECK(parse_edit("\"sliding_attention\", \"full_attention\"]", "\"sliding_attention\", \"sliding_attention\"]", &c,
                     err, sizeof err) == 0);
    CHECK(c.full[29] == 1);
    /* num_global_key_value_heads null: the sliding layers' count */
    CHECK(parse_edit("\"num_global_key_value_heads\": 2", "\"num_global_key_value_heads\": null", &c, err,
                     sizeof err) == 0);
    CHECK(c.kv_full == 8);

    static const struct {
        const char *from, *to, *field;
    } bad[] = {
        {"\"hidden_activation\": \"gelu_pytorch_tanh\"", "\"hidden_activation\": \"silu\"", "text_config.hidden_activation"},
        {"\"use_bidirectional_attention\": \"vision\"", "\"use_bidirectional_attention\": \"all\"",
         "text_config.use_bidirectional_attention"},
        {"\"attention_bias\": false", "\"attention_bias\": true", "text_config.attention_bias"},
        {"\"num_experts\": 128,", "", "text_config.num_experts"},
        {"\"top_k_experts\": 8", "\"top_k_experts\": 200", "text_config.top_k_experts"},
        {"\"num_global_key_value_heads\": 2", "\"num_global_key_value_heads\": 3",
         "text_config.num_global_key_value_heads"},
        {"\"global_head_dim\": 512", "\"global_head_dim\": 511", "text_config.global_head_dim"},
        {"\"rope_type\": \"proportional\"", "\"rope_type\": \"yarn\"",
         "text_config.rope_parameters.full_attention.rope_type"},
        {"\"rope_type\": \"default\"", "\"rope_type\": \"linear\"",
         "text_config.rope_parameters.sliding_attention.rope_type"},
        {"\"final_logit_softcapping\": 30.0", "\"final_logit_softcapping\": null", "text_config.final_logit_softcapping"},
        {"\"tie_word_embeddings\": true", "\"tie_word_embeddings\": false", "tie_word_embeddings"},
        {"\"model_type\": \"diffusion_gemma\",", "\"model_type\": \"gemma4\",", "model_type"},
        {"\"text_config\": {", "\"text_confi\": {", "text_config"},
        {"\"sliding_attention\", \"sliding_attention\", \"sliding_attention\", \"sliding_attention\", \"sliding_attention\","
         " \"full_attention\",",
         "", "text_config.layer_types"},
        {"\"eos_token_id\": [1, 106, 50]", "\"eos_token_id\": [1, 262144]", "eos_token_id"},
        {"\"max_position_embeddings\": 262144,", "\"max_position_embeddings\": 262144, \"attn_logit_softcapping\": 50.0,",
         "text_config.attn_logit_softcapping"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        int rc = parse_edit(bad[i].from, bad[i].to, &c, err, sizeof err);
        CHECK(rc == -1);
        char want[160];
        snprintf(want, sizeof want, "dg/config.json: field %s:", bad[i].field);
        CHECK_CONTAINS(err, want);
    }
    CHECK(tb_dgemma_config_parse("{", "x.json", &c, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "x.json: not valid JSON");
}

/* ------------------------------------------------------------ loader */

typedef struct tensor {
    char name[160];
    int ndim;
    int64_t shape[3];
    const float *data;
} tensor;

typedef struct tlist {
    tensor t[512];
    int n;
} tlist;

static void add(tlist *l, const char *name, const float *data, int ndim, int64_t a, int64_t b, int64_t c)
{
    tensor *t = &l->t[l->n++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = ndim, t->shape[0] = a, t->shape[1] = b, t->shape[2] = c, t->data = data;
}

/* every tensor of m in the published names */
static void published_tensors(const tb_dgemma_model *m, tlist *l)
{
    const tb_dgemma_config *c = &m->cfg;
    int64_t h = c->hidden, I = c->inter, E = c->n_experts, mi = c->moe_inter;
    l->n = 0;
    add(l, "model.decoder.embed_tokens.weight", m->embed, 2, c->vocab, h, 0);
    add(l, "model.decoder.norm.weight", m->final_norm, 1, h, 0, 0);
    add(l, "model.decoder.self_conditioning.pre_norm.weight", m->sc_pre_norm, 1, h, 0, 0);
    add(l, "model.decoder.self_conditioning.gate_proj.weight", m->sc_gate_up, 2, I, h, 0);
    add(l, "model.decoder.self_conditioning.up_proj.weight", m->sc_gate_up + I * h, 2, I, h, 0);
    add(l, "model.decoder.self_conditioning.down_proj.weight", m->sc_down, 2, h, I, 0);
    for (int i = 0; i < c->n_layers; i++) {
        const tb_dgemma_layer *L = &m->layers[i];
        int64_t hd = L->hd, kvd = (int64_t)L->kv * hd, q = (int64_t)c->n_heads * hd;
        char n[160];
#define ADD(suffix, p, nd, a, b, cc) (snprintf(n, sizeof n, "model.decoder.layers.%d.%s", i, suffix), add(l, n, p, nd, a, b, cc))
        ADD("input_layernorm.weight", L->attn_norm, 1, h, 0, 0);
        ADD("self_attn.q_proj.weight", L->wq, 2, q, h, 0);
        ADD("self_attn.k_proj.weight", L->wk, 2, kvd, h, 0);
        if (L->wv)
            ADD("self_attn.v_proj.weight", L->wv, 2, kvd, h, 0);
        ADD("self_attn.q_norm.weight", L->q_norm, 1, hd, 0, 0);
        ADD("self_attn.k_norm.weight", L->k_norm, 1, hd, 0, 0);
        ADD("self_attn.o_proj.weight", L->wo, 2, h, q, 0);
        ADD("post_attention_layernorm.weight", L->post_attn_norm, 1, h, 0, 0);
        ADD("pre_feedforward_layernorm.weight", L->pre_ffn_norm, 1, h, 0, 0);
        ADD("mlp.gate_proj.weight", L->gate_up, 2, I, h, 0);
        ADD("mlp.up_proj.weight", L->gate_up + I * h, 2, I, h, 0);
        ADD("mlp.down_proj.weight", L->down, 2, h, I, 0);
        ADD("post_feedforward_layernorm_1.weight", L->post_ffn_norm1, 1, h, 0, 0);
        ADD("pre_feedforward_layernorm_2.weight", L->pre_ffn_norm2, 1, h, 0, 0);
        ADD("router.proj.weight", L->router, 2, E, h, 0);
        ADD("router.scale", L->router_scale, 1, h, 0, 0);
        ADD("router.per_expert_scale", L->expert_scale, 1, E, 0, 0);
        ADD("experts.gate_up_proj", L->experts_gate_up, 3, E, 2 * mi, h);
        ADD("experts.down_proj", L->experts_down, 3, E, h, mi);
        ADD("post_feedforward_layernorm_2.weight", L->post_ffn_norm2, 1, h, 0, 0);
        ADD("post_feedforward_layernorm.weight", L->post_ffn_norm, 1, h, 0, 0);
        ADD("layer_scalar", &L->scalar_dec, 1, 1, 0, 0);
#undef ADD
        snprintf(n, sizeof n, "model.encoder.language_model.layers.%d.layer_scalar", i);
        add(l, n, &L->scalar_enc, 1, 1, 0, 0);
    }
}

static int64_t count(const tensor *t)
{
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= t->shape[d];
    return n;
}

/* a float32 safetensors file of l's tensors */
static void write_safetensors(const char *path, const tlist *l)
{
    char *hdr = calloc(1, 1 << 16);
    size_t off = 0, len = 0;
    len += (size_t)sprintf(hdr + len, "{");
    for (int i = 0; i < l->n; i++) {
        const tensor *t = &l->t[i];
        size_t bytes = (size_t)count(t) * 4;
        len += (size_t)sprintf(hdr + len, "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[", i ? "," : "", t->name);
        for (int d = 0; d < t->ndim; d++)
            len += (size_t)sprintf(hdr + len, "%s%lld", d ? "," : "", (long long)t->shape[d]);
        len += (size_t)sprintf(hdr + len, "],\"data_offsets\":[%zu,%zu]}", off, off + bytes);
        off += bytes;
    }
    len += (size_t)sprintf(hdr + len, "}");
    while (len % 8)
        hdr[len++] = ' ';
    FILE *f = fopen(path, "wb");
    uint64_t n = len;
    fwrite(&n, 8, 1, f);
    fwrite(hdr, 1, len, f);
    for (int i = 0; i < l->n; i++)
        fwrite(l->t[i].data, 4, (size_t)count(&l->t[i]), f);
    fclose(f);
    free(hdr);
}

static const char *tiny_config =
    "{\"architectures\": [\"DiffusionGemmaForBlockDiffusion\"], \"model_type\": \"diffusion_gemma\","
    " \"canvas_length\": 8, \"tie_word_embeddings\": true, \"text_config\": {\"vocab_size\": 128, \"hidden_size\": 32,"
    " \"num_hidden_layers\": 3, \"layer_types\": [\"sliding_attention\", \"sliding_attention\", \"full_attention\"],"
    " \"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"head_dim\": 16, \"num_global_key_value_heads\": 1,"
    " \"global_head_dim\": 32, \"sliding_window\": 6, \"intermediate_size\": 48, \"num_experts\": 4,"
    " \"top_k_experts\": 2, \"moe_intermediate_size\": 16, \"max_position_embeddings\": 4096,"
    " \"rope_parameters\": {\"sliding_attention\": {\"rope_type\": \"default\", \"rope_theta\": 10000.0},"
    " \"full_attention\": {\"rope_type\": \"proportional\", \"partial_rotary_factor\": 0.25, \"rope_theta\": 1000000.0}},"
    " \"dtype\": \"float32\"}}";

static void write_folder(const char *dir, const tlist *l)
{
    char p[512];
    mkdir(dir, 0700);
    snprintf(p, sizeof p, "%s/config.json", dir);
    FILE *f = fopen(p, "w");
    fputs(tiny_config, f);
    fclose(f);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    write_safetensors(p, l);
}

static int same_floats(const float *a, const float *b, size_t n)
{
    return memcmp(a, b, n * sizeof *a) == 0;
}

static void test_loader(const tb_dgemma_model *pm)
{
    char dir[] = "/tmp/tb_dgemma_XXXXXX", err[512];
    CHECK(mkdtemp(dir) != NULL);
    tlist *l = malloc(sizeof *l);
    published_tensors(pm, l);
    write_folder(dir, l);
    tb_dgemma_model m;
    int rc = tb_dgemma_load(dir, &m, err, sizeof err);
    CHECK(rc == 0);
    if (rc)
        fprintf(stderr, "load: %s\n", err);
    else {
        CHECK(m.arena_floats == pm->arena_floats);
        CHECK(same_floats(m.arena, pm->arena, m.arena_floats));
        for (int i = 0; i < m.cfg.n_layers; i++)
            CHECK(m.layers[i].scalar_enc == pm->layers[i].scalar_enc && m.layers[i].scalar_dec == pm->layers[i].scalar_dec);
        CHECK(m.embed_scale == pm->embed_scale);
        tb_dgemma_free(&m);
    }
    /* a missing tensor: named, with the file */
    tlist *b = malloc(sizeof *b);
    *b = *l;
    for (int i = 0; i < b->n; i++)
        if (strcmp(b->t[i].name, "model.decoder.layers.1.router.per_expert_scale") == 0)
            b->t[i] = b->t[--b->n];
    write_folder(dir, b);
    CHECK(tb_dgemma_load(dir, &m, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "tensor model.decoder.layers.1.router.per_expert_scale: not found");
    CHECK_CONTAINS(err, dir);
    /* a wrong shape: a full layer's k_proj at the sliding size */
    *b = *l;
    for (int i = 0; i < b->n; i++)
        if (strcmp(b->t[i].name, "model.decoder.layers.2.self_attn.k_proj.weight") == 0)
            b->t[i].shape[0] = 16;
    write_folder(dir, b);
    CHECK(tb_dgemma_load(dir, &m, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "tensor model.decoder.layers.2.self_attn.k_proj.weight: shape [16, 32], expected [32, 32]");
    /* experts as [E][H][2 mi] (transposed): refused */
    *b = *l;
    for (int i = 0; i < b->n; i++)
        if (strcmp(b->t[i].name, "model.decoder.layers.0.experts.gate_up_proj") == 0)
            b->t[i].shape[1] = 16; /* mi rows: gate or up alone */
    write_folder(dir, b);
    CHECK(tb_dgemma_load(dir, &m, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "tensor model.decoder.layers.0.experts.gate_up_proj: shape [4, 16, 32], expected [4, 32, 32]");
    /* a v_proj in a full layer */
    *b = *l;
    add(b, "model.decoder.layers.2.self_attn.v_proj.weight", pm->layers[2].wk, 2, 32, 32, 0);
    write_folder(dir, b);
    CHECK(tb_dgemma_load(dir, &m, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "layers.2.self_attn.v_proj.weight: a full-attention layer has no v_proj");
    /* the encoder pass's layer_scalar */
    *b = *l;
    for (int i = 0; i < b->n; i++)
        if (strcmp(b->t[i].name, "model.encoder.language_model.layers.0.layer_scalar") == 0)
            b->t[i] = b->t[--b->n];
    write_folder(dir, b);
    CHECK(tb_dgemma_load(dir, &m, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "tensor model.encoder.language_model.layers.0.layer_scalar: not found");
    char p[600];
    snprintf(p, sizeof p, "%s/config.json", dir), unlink(p);
    snprintf(p, sizeof p, "%s/model.safetensors", dir), unlink(p);
    rmdir(dir);
    free(l), free(b);
}

/* ------------------------------------------------------------ forward */

static double max_diff(const float *a, const float *b, size_t n)
{
    double d = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]);
        d = isnan(e) ? INFINITY : e > d ? e : d;
    }
    return d;
}

static void test_forward(const tb_dgemma_model *m)
{
    const tb_dgemma_config *c = &m->cfg;
    tb_dgemma_state a, b;
    char err[256];
    CHECK(tb_dgemma_state_init(&a, m, 64, 8, err, sizeof err) == 0);  /* 20 prompt rows in chunks of 8 */
    CHECK(tb_dgemma_state_init(&b, m, 64, 32, err, sizeof err) == 0); /* in one */
    int32_t prompt[20], canvas[8];
    for (int i = 0; i < 20; i++)
        prompt[i] = (i * 37 + 5) % c->vocab;
    for (int i = 0; i < 8; i++)
        canvas[i] = (i * 53 + 11) % c->vocab;
    float *ha = malloc(20 * 32 * 4), *hb = malloc(20 * 32 * 4);
    float *la = malloc(8 * 128 * 4), *lb = malloc(8 * 128 * 4), *lc = malloc(8 * 128 * 4);
    CHECK(tb_dgemma_encode(&a, prompt, 20, ha) == 0 && tb_dgemma_encode(&b, prompt, 20, hb) == 0);
    CHECK(max_diff(ha, hb, 20 * 32) < 1e-5);
    CHECK(a.len == 20);
    CHECK(tb_dgemma_denoise(&a, canvas, 8, NULL, la) == 0);
    CHECK(a.len == 20);
    CHECK(tb_dgemma_denoise(&b, canvas, 8, NULL, lb) == 0);
    CHECK(max_diff(la, lb, 8 * 128) < 1e-4);
    /* the second pass reads the same cache: the same logits */
    CHECK(tb_dgemma_denoise(&a, canvas, 8, NULL, lc) == 0);
    CHECK(max_diff(la, lc, 8 * 128) == 0);
    /* the canvas is bidirectional: row 0 reads row 5; the encoder is
     * causal: rows before a changed prompt token keep their outputs */
    int32_t c2[8];
    memcpy(c2, canvas, sizeof c2);
    c2[5] = (c2[5] + 1) % c->vocab;
    CHECK(tb_dgemma_denoise(&a, c2, 8, NULL, lc) == 0);
    CHECK(max_diff(la, lc, 128) > 1e-4);
    {
        tb_dgemma_state e2;
        int32_t p2[20];
        memcpy(p2, prompt, sizeof p2);
        p2[10] = (p2[10] + 1) % c->vocab;
        float *h2 = malloc(20 * 32 * 4);
        CHECK(tb_dgemma_state_init(&e2, m, 64, 8, err, sizeof err) == 0);
        CHECK(tb_dgemma_encode(&e2, p2, 20, h2) == 0);
        CHECK(max_diff(ha, h2, 10 * 32) == 0);
        CHECK(max_diff(ha + 10 * 32, h2 + 10 * 32, 32) > 1e-4);
        tb_dgemma_state_free(&e2);
        free(h2);
    }
    /* the encoder embeds the image token as pad; the canvas pass does not */
    {
        tb_dgemma_model mi = *m; /* shares m's weights */
        mi.cfg.image_id = 77;
        tb_dgemma_state e1, e2;
        int32_t img[3] = {9, 77, 10}, pad[3] = {9, 0, 10};
        float h1[3 * 32], h2[3 * 32];
        CHECK(tb_dgemma_state_init(&e1, &mi, 64, 8, err, sizeof err) == 0);
        CHECK(tb_dgemma_state_init(&e2, &mi, 64, 8, err, sizeof err) == 0);
        CHECK(tb_dgemma_encode(&e1, img, 3, h1) == 0 && tb_dgemma_encode(&e2, pad, 3, h2) == 0);
        CHECK(max_diff(h1, h2, 3 * 32) == 0);
        int32_t ci[8] = {77, 1, 2, 3, 4, 5, 6, 7}, cp[8] = {0, 1, 2, 3, 4, 5, 6, 7};
        float *l1 = malloc(8 * 128 * 4), *l2 = malloc(8 * 128 * 4);
        CHECK(tb_dgemma_denoise(&e1, ci, 8, NULL, l1) == 0 && tb_dgemma_denoise(&e2, cp, 8, NULL, l2) == 0);
        CHECK(max_diff(l1, l2, 8 * 128) > 1e-4);
        tb_dgemma_state_free(&e1), tb_dgemma_state_free(&e2);
        free(l1), free(l2);
    }
    /* self-conditioning changes the input */
    CHECK(tb_dgemma_denoise(&a, canvas, 8, la, lc) == 0);
    CHECK(max_diff(la, lc, 8 * 128) > 1e-3);
    /* softcap: |logit| < 30 */
    double mx = 0;
    for (int i = 0; i < 8 * 128; i++)
        mx = fabs(la[i]) > mx ? fabs(la[i]) : mx;
    CHECK(mx < 30 && mx > 0);
    /* refusals: an id outside the vocabulary, a cache overflow */
    int32_t badc[8];
    memcpy(badc, canvas, sizeof badc);
    badc[3] = c->vocab;
    CHECK(tb_dgemma_denoise(&a, badc, 8, NULL, lc) == -1);
    CHECK(tb_dgemma_encode(&a, prompt, 20, NULL) == 0 && tb_dgemma_encode(&a, prompt, 20, NULL) == 0);
    CHECK(tb_dgemma_encode(&a, prompt, 20, NULL) == -1); /* 80 > 64 */
    CHECK(a.len == 60);
    tb_dgemma_state_free(&b);
    CHECK(tb_dgemma_state_init(&b, m, 64, 4, err, sizeof err) == -1); /* rows below the canvas */
    CHECK_CONTAINS(err, "canvas");
    tb_dgemma_state_free(&a);
    free(ha), free(hb), free(la), free(lb), free(lc);
}

/* The router's margin and the test-only replay (dgemma_forward.h): what
 * tests/gpu/test_dgemma_gpu.c relies on to compare another engine's
 * passes across routing near-ties. */
static void test_routes(void)
{
    tb_dgemma_model m;
    char err[256];
    CHECK(tb_dgemma_preset("tiny-diffusiongemma", 5, &m, err, sizeof err) == 0);
    const tb_dgemma_config *c = &m.cfg;
    int E = c->n_experts, K = c->top_k, H = c->hidden, L = c->n_layers;
    int32_t prompt[20], canvas[8];
    for (int i = 0; i < 20; i++)
        prompt[i] = (i * 37 + 5) % c->vocab;
    for (int i = 0; i < 8; i++)
        canvas[i] = (i * 53 + 11) % c->vocab;
    float *la = malloc(8 * 128 * 4), *lb = malloc(8 * 128 * 4);
    size_t nf = (size_t)L * 8 * K;
    int32_t *f01 = malloc(nf * sizeof *f01), *f10 = malloc(nf * sizeof *f10), *f23 = malloc(nf * sizeof *f23);
    for (size_t i = 0; i < nf; i += (size_t)K)
        f01[i] = 0, f01[i + 1] = 1, f10[i] = 1, f10[i + 1] = 0, f23[i] = 2, f23[i + 1] = 3;
    tb_dgemma_state a;
    CHECK(tb_dgemma_state_init(&a, &m, 64, 8, err, sizeof err) == 0);
    /* random weights: a margin in (0, 1), each pass's own (the 20-row
     * encode's smallest is below the 8-row canvas pass's here) */
    CHECK(tb_dgemma_encode(&a, prompt, 20, NULL) == 0);
    double genc = a.route_gap;
    int32_t c2[8];
    for (int i = 0; i < 8; i++)
        c2[i] = (i * 29 + 3) % c->vocab;
    CHECK(tb_dgemma_denoise(&a, c2, 8, NULL, la) == 0);
    double gc2 = a.route_gap;
    CHECK(tb_dgemma_denoise(&a, canvas, 8, NULL, la) == 0);
    fprintf(stderr, "route margins: encode %.3g, canvas %.3g, another canvas %.3g\n", genc, a.route_gap, gc2);
    CHECK(genc > 0 && genc < 1e-2 && gc2 > genc && a.route_gap > 0 && a.route_gap < gc2);
    CHECK(a.route_replaced == 0 && a.route_replaced_gap == 0);
    /* replay: another set where the router chose otherwise; counted, with
     * the largest margin it overrode; the order within a set is no matter */
    a.route_force = f23, a.route_force_n = nf;
    CHECK(tb_dgemma_denoise(&a, canvas, 8, NULL, lb) == 0);
    CHECK(max_diff(la, lb, 8 * 128) > 1e-4);
    int rep23 = a.route_replaced;
    CHECK(rep23 > 0 && rep23 < L * 8 && a.route_replaced_gap > a.route_gap && a.route_replaced_gap < 1);
    a.route_force = f01;
    CHECK(tb_dgemma_denoise(&a, canvas, 8, NULL, la) == 0);
    a.route_force = f10;
    CHECK(tb_dgemma_denoise(&a, canvas, 8, NULL, lb) == 0);
    CHECK(max_diff(la, lb, 8 * 128) == 0);
    /* a replay of the wrong length or naming no expert: refused */
    a.route_force_n = nf - 1;
    CHECK(tb_dgemma_denoise(&a, canvas, 8, NULL, lb) == -1);
    a.route_force_n = nf;
    f10[5] = E;
    CHECK(tb_dgemma_denoise(&a, canvas, 8, NULL, lb) == -1);
    a.route_force = NULL;
    tb_dgemma_state_free(&a);
    /* a router of one live row, 3 of 4 experts taken: the other three
     * tie, so where expert 0 leads the 3rd and the one left out are equal
     * (margin 0; the 1st and the one left out are not); where it trails,
     * the margin is theirs to it */
    for (int l = 0; l < L; l++)
        for (int i = 0; i < E * H; i++)
            m.layers[l].router[i] = i < H ? m.layers[l].router[i] * 100 : 0;
    m.cfg.top_k = 3;
    CHECK(tb_dgemma_state_init(&a, &m, 64, 8, err, sizeof err) == 0);
    CHECK(tb_dgemma_encode(&a, prompt, 20, NULL) == 0);
    CHECK(a.route_gap == 0);
    tb_dgemma_state_free(&a);
    m.cfg.top_k = K;
    /* all tie: replaying the router's own choice (ties to the lower index)
     * replaces nothing and changes no bit */
    CHECK(tb_dgemma_state_init(&a, &m, 64, 8, err, sizeof err) == 0);
    CHECK(tb_dgemma_encode(&a, prompt, 20, NULL) == 0);
    for (int l = 0; l < L; l++) /* all tie */
        memset(m.layers[l].router, 0, (size_t)E * H * sizeof(float));
    CHECK(tb_dgemma_denoise(&a, canvas, 8, NULL, la) == 0);
    CHECK(a.route_gap == 0);
    a.route_force = f01, a.route_force_n = nf;
    CHECK(tb_dgemma_denoise(&a, canvas, 8, NULL, lb) == 0);
    CHECK(a.route_replaced == 0 && max_diff(la, lb, 8 * 128) == 0);
    a.route_force = f23;
    CHECK(tb_dgemma_denoise(&a, canvas, 8, NULL, lb) == 0);
    CHECK(a.route_replaced == L * 8 && a.route_replaced_gap == 0);
    tb_dgemma_state_free(&a);
    tb_dgemma_free(&m);
    free(la), free(lb), free(f01), free(f10), free(f23);
}

/* ------------------------------------------------------------ sampler */

static void test_schedule(void)
{
    tb_dg_params p;
    tb_dg_params_default(&p);
    CHECK(tb_dg_temperature(&p, 48) == 0.8f);
    CHECK_NEAR(tb_dg_temperature(&p, 1), 0.4 + 0.4 / 48, 1e-6);
    CHECK_NEAR(tb_dg_temperature(&p, 24), 0.6, 1e-6);
    for (int s = 48; s > 1; s--)
        CHECK_NEAR(tb_dg_temperature(&p, s) - tb_dg_temperature(&p, s - 1), 1.0 / 120, 1e-6);
    char why[128];
    CHECK(tb_dg_params_check(&p, why, sizeof why) == 0);
    p.t_max = 0.3;
    CHECK(tb_dg_params_check(&p, why, sizeof why) == -1);
    CHECK_CONTAINS(why, "t_max");
}

static void test_accept(void)
{
    unsigned char acc[8];
    int order[8];
    /* sorted 0.01 0.02 0.03 0.05 0.5: the sums before them 0, .01, .03, .06, .11 */
    float e1[5] = {0.05f, 0.02f, 0.5f, 0.03f, 0.01f};
    tb_dg_accept(0.1, e1, 5, acc, order);
    CHECK(acc[0] && acc[1] && !acc[2] && acc[3] && acc[4]);
    /* the lowest is always accepted, whatever it is */
    float e2[3] = {3.0f, 2.0f, 4.0f};
    tb_dg_accept(0.1, e2, 3, acc, order);
    CHECK(!acc[0] && acc[1] && !acc[2]);
    /* a sum before exactly at the bound is accepted (<=) */
    float e3[3] = {0.0625f, 0.0625f, 0.125f}; /* before: 0, .0625, .125 */
    tb_dg_accept(0.125, e3, 3, acc, order);
    CHECK(acc[0] && acc[1] && acc[2]);
    tb_dg_accept(0.12, e3, 3, acc, order);
    CHECK(acc[0] && acc[1] && !acc[2]);
}

static void test_decide(void)
{
    enum { CC = 4, VV = 6 };
    tb_dg_params p;
    tb_dg_params_default(&p);
    float l[CC * VV], q[CC * VV], ent[CC];
    int32_t in[CC] = {0, 1, 2, 3}, ren[CC] = {3, 3, 3, 3}, smp[CC], am[CC], nx[CC];
    unsigned char acc[CC];
    int order[CC];
    double mean;
    for (int i = 0; i < CC * VV; i++)
        l[i] = 0, q[i] = 1;
    l[0 * VV + 2] = 30;  /* row 0: peaked on 2 */
    l[1 * VV + 4] = 30;  /* row 1: peaked on 4 */
    l[2 * VV + 1] = 0.1f; /* row 2: nearly flat, argmax 1 */
    /* row 3 flat: argmax the first (0) */
    q[2 * VV + 5] = 1e-6f; /* row 2's noise picks 5 */
    tb_dg_decide(&p, CC, VV, 48, l, q, in, ren, smp, am, acc, ent, nx, &mean, order);
    CHECK(am[0] == 2 && am[1] == 4 && am[2] == 1 && am[3] == 0);
    CHECK(smp[0] == 2 && smp[1] == 4 && smp[2] == 5);
    CHECK_NEAR(l[0 * VV + 2], 30 / 0.8, 1e-5); /* processed in place: z = l / T */
    CHECK(ent[0] < 1e-10 && ent[1] < 1e-10);
    CHECK_NEAR(ent[3], log(6.0), 1e-6);
    /* ranks: rows 0, 1 (~0), row 2 (just under ln 6), row 3 (ln 6): the sum
     * before row 2 is ~0, before row 3 ~1.79 */
    CHECK(acc[0] && acc[1] && acc[2] && !acc[3]);
    CHECK(nx[0] == 2 && nx[1] == 4 && nx[2] == 5 && nx[3] == 3); /* rejected: the renoise id */
    CHECK_NEAR(mean, ((double)ent[0] + ent[1] + ent[2] + ent[3]) / 4, 1e-9);
}

static void test_rng(void)
{
    tb_dg_rng r;
    tb_dg_rng_seed(&r, 7);
    int seen[7] = {0};
    int32_t ids[7000];
    tb_dg_rng_ids(&r, ids, 7000, 7);
    int ok = 1;
    for (int i = 0; i < 7000; i++) {
        ok &= ids[i] >= 0 && ids[i] < 7;
        if (ids[i] >= 0 && ids[i] < 7)
            seen[ids[i]]++;
    }
    CHECK(ok);
    for (int v = 0; v < 7; v++)
        CHECK(seen[v] > 850 && seen[v] < 1150); /* 1000 each, +-4.7 sigma */
    CHECK(r.n == 7000);
    /* the stream is counter-based: value n does not depend on how it was drawn */
    tb_dg_rng a, b;
    tb_dg_rng_seed(&a, 99), tb_dg_rng_seed(&b, 99);
    float e1[10], e2[10];
    tb_dg_rng_exp(&a, e1, 10);
    tb_dg_rng_exp(&b, e2, 4), tb_dg_rng_exp(&b, e2 + 4, 6);
    CHECK(memcmp(e1, e2, sizeof e1) == 0);
    /* Exp(1): mean 1, all > 0 */
    static float e[200000];
    tb_dg_rng_exp(&a, e, 200000);
    double sum = 0;
    int pos = 1;
    for (int i = 0; i < 200000; i++)
        sum += e[i], pos &= e[i] > 0 && isfinite(e[i]);
    CHECK(pos);
    CHECK_NEAR(sum / 200000, 1.0, 0.01);
    /* the first values of seed 0 are splitmix64's published ones */
    tb_dg_rng_seed(&a, 0);
    CHECK(tb_dg_rng_next(&a) == 0xE220A8397B1DCDAFULL);
    CHECK(tb_dg_rng_next(&a) == 0x6E789E6AA1B965F4ULL);
}

/* A scripted engine: logits by a rule of (step, canvas); counts calls. */
typedef struct fake {
    int C, V;
    int mode;        /* 0 peaked on (i + canvas_no) % V; 1 flat; 2 peaked, argmax flips every step; 3 EOS at 3 */
    int denoises, encodes, encoded_tokens, canvas_no;
    int32_t last_encoded[64];
    int sc_first_null; /* the first step of each canvas had sc NULL */
    int sc_later_set;
    int step_in_canvas;
} fake;

static int f_encode(void *ctx, const int32_t *t, int n)
{
    fake *f = ctx;
    f->encodes++, f->encoded_tokens += n;
    if (f->encodes > 1) {
        memcpy(f->last_encoded, t, (size_t)n * sizeof *t);
        f->canvas_no++;
    }
    f->step_in_canvas = 0;
    return 0;
}

static int f_denoise(void *ctx, const int32_t *canvas, const float *sc, float *logits)
{
    fake *f = ctx;
    (void)canvas;
    if (f->step_in_canvas == 0)
        f->sc_first_null += sc == NULL;
    else
        f->sc_later_set += sc != NULL;
    for (int i = 0; i < f->C; i++)
        for (int v = 0; v < f->V; v++) {
            int peak = f->mode == 2 ? (i + f->denoises) % f->V : f->mode == 3 && i == 3 ? 1 : (i + f->canvas_no + 5) % f->V;
            logits[i * f->V + v] = f->mode == 1 ? 0.0f : v == peak ? 30.0f : 0.0f;
        }
    f->denoises++, f->step_in_canvas++;
    return 0;
}

static int steps_seen[16], n_steps_seen;
static void on_commit(void *ctx, int canvas, const int32_t *t, int n_valid, int steps)
{
    (void)ctx, (void)canvas, (void)t, (void)n_valid;
    steps_seen[n_steps_seen++ % 16] = steps;
}

static void test_generate(void)
{
    enum { CC = 8, VV = 16 };
    tb_dg_params p;
    tb_dg_params_default(&p);
    p.max_new_tokens = 3 * CC - 2; /* 3 canvases */
    int32_t prompt[5] = {3, 4, 5, 6, 7}, out[64];
    int n_out;
    tb_dg_stats st;
    char why[256];
    tb_dg_hooks h = {.on_commit = on_commit};
    /* peaked and canvas-independent: stable at step 2 and confident: 2 steps a canvas */
    fake f = {CC, VV, 0, 0, 0, 0, 0, {0}, 0, 0, 0};
    tb_dg_engine e = {&f, VV, CC, f_encode, f_denoise, NULL};
    n_steps_seen = 0;
    CHECK(tb_dg_generate(&e, &p, prompt, 5, 1, NULL, &h, out, &n_out, &st, why, sizeof why) == 0);
    CHECK(n_out == 3 * CC && st.canvases == 3 && st.steps == 6 && steps_seen[0] == 2 && steps_seen[2] == 2);
    CHECK(f.encodes == 3 && f.encoded_tokens == 5 + 2 * CC); /* the prompt, then canvases 0 and 1 */
    CHECK(st.encodes == 3);
    for (int i = 0; i < CC; i++) {
        CHECK(out[i] == (i + 5) % VV);          /* canvas 0's argmax */
        CHECK(out[CC + i] == (i + 6) % VV);     /* canvas 1's */
        CHECK(f.last_encoded[i] == (i + 6) % VV); /* canvas 1 was encoded before canvas 2 */
    }
    CHECK(f.sc_first_null == 3 && f.sc_later_set == 3);
    /* flat logits: never confident: the 48-step cap */
    fake g = {CC, VV, 1, 0, 0, 0, 0, {0}, 0, 0, 0};
    e.ctx = &g;
    p.max_new_tokens = CC;
    n_steps_seen = 0;
    CHECK(tb_dg_generate(&e, &p, prompt, 5, 1, NULL, &h, out, &n_out, &st, why, sizeof why) == 0);
    CHECK(st.steps == 48 && steps_seen[0] == 48 && n_out == CC);
    /* the argmax flips every step: confident but never stable: the cap */
    fake k = {CC, VV, 2, 0, 0, 0, 0, {0}, 0, 0, 0};
    e.ctx = &k;
    CHECK(tb_dg_generate(&e, &p, prompt, 5, 1, NULL, &h, out, &n_out, &st, why, sizeof why) == 0);
    CHECK(st.steps == 48);
    /* ... unless stability 0: confident alone stops at the first step */
    fake k2 = {CC, VV, 2, 0, 0, 0, 0, {0}, 0, 0, 0};
    e.ctx = &k2;
    p.stability = 0;
    CHECK(tb_dg_generate(&e, &p, prompt, 5, 1, NULL, &h, out, &n_out, &st, why, sizeof why) == 0);
    CHECK(st.steps == 1);
    /* stability 2: the argmax must equal the last two: 3 steps */
    fake k3 = {CC, VV, 0, 0, 0, 0, 0, {0}, 0, 0, 0};
    e.ctx = &k3;
    p.stability = 2;
    CHECK(tb_dg_generate(&e, &p, prompt, 5, 1, NULL, &h, out, &n_out, &st, why, sizeof why) == 0);
    CHECK(st.steps == 3);
    p.stability = 1;
    /* EOS (id 1) at position 3: padded after it, and the request ends */
    int32_t eos[2] = {9, 1};
    p.eos_ids = eos, p.n_eos = 2, p.max_new_tokens = 3 * CC;
    fake x = {CC, VV, 3, 0, 0, 0, 0, {0}, 0, 0, 0};
    e.ctx = &x;
    CHECK(tb_dg_generate(&e, &p, prompt, 5, 1, NULL, &h, out, &n_out, &st, why, sizeof why) == 0);
    CHECK(n_out == CC && st.eos == 1 && st.canvases == 1 && x.encodes == 1);
    CHECK(out[0] == 5 && out[1] == 6 && out[2] == 7 && out[3] == 1);
    for (int i = 4; i < CC; i++)
        CHECK(out[i] == 0);
    CHECK(st.committed == 4);
    /* the same seed draws the same noise: the same run */
    int32_t out2[64];
    fake y = {CC, VV, 1, 0, 0, 0, 0, {0}, 0, 0, 0}, z = y;
    p.n_eos = 0, p.max_new_tokens = CC, p.max_steps = 5;
    e.ctx = &y;
    CHECK(tb_dg_generate(&e, &p, prompt, 5, 42, NULL, NULL, out, &n_out, &st, why, sizeof why) == 0);
    e.ctx = &z;
    CHECK(tb_dg_generate(&e, &p, prompt, 5, 42, NULL, NULL, out2, &n_out, &st, why, sizeof why) == 0);
    CHECK(memcmp(out, out2, CC * sizeof *out) == 0);
    p.max_steps = 0;
    CHECK(tb_dg_generate(&e, &p, prompt, 5, 42, NULL, NULL, out2, &n_out, &st, why, sizeof why) == -1);
    CHECK_CONTAINS(why, "max_steps");
}

/* An engine that decides "on its device" (tb_dg_engine.denoise_decide) by
 * the host's own rules: the CPU passes, z kept between steps, the Exp(1)
 * values drawn from the stream at n0. generate() through it must equal
 * generate() through the plain CPU engine bit for bit: the sampler's
 * device path (the stream's bookkeeping, the self-conditioning flag, the
 * host's settle) is the host path. */
typedef struct dev_emu {
    tb_dgemma_state *st;
    int C, V, calls;
    float *z, *q;
    int32_t *scratch; /* [3 C] */
    unsigned char *acc;
    int *order;
} dev_emu;

static int emu_encode(void *ctx, const int32_t *t, int n)
{
    return tb_dgemma_encode(((dev_emu *)ctx)->st, t, n, NULL);
}

static int emu_denoise_decide(void *ctx, const int32_t *canvas, int use_sc, float temperature, uint64_t seed,
                              uint64_t n0, int32_t *sampled, int32_t *argmax, float *entropy)
{
    dev_emu *d = ctx;
    size_t cv = (size_t)d->C * d->V;
    float *l = malloc(cv * sizeof *l);
    if (!l || tb_dgemma_denoise(d->st, canvas, d->C, use_sc ? d->z : NULL, l)) {
        free(l);
        return -1;
    }
    tb_dg_rng r;
    tb_dg_rng_seed(&r, seed);
    r.n = n0;
    tb_dg_rng_exp(&r, d->q, cv);
    /* tb_dg_decide at the step whose temperature this is: z in place */
    tb_dg_params p;
    tb_dg_params_default(&p);
    int s = 1;
    while (s < p.max_steps && tb_dg_temperature(&p, s) != temperature)
        s++;
    double mean;
    tb_dg_decide(&p, d->C, d->V, s, l, d->q, canvas, d->scratch, sampled, argmax, d->acc, entropy,
                 d->scratch + d->C, &mean, d->order);
    memcpy(d->z, l, cv * sizeof *l);
    free(l);
    d->calls++;
    return 0;
}

typedef struct step_log {
    int n;
    int32_t ids[512];
    float ent[256];
} step_log;

static void log_step(void *ctx, const tb_dg_step *s)
{
    step_log *g = ctx;
    for (int i = 0; i < 8 && g->n < 64; i++) {
        g->ids[g->n * 8 + i] = s->sampled[i] * 3 + s->accept[i];
        g->ent[(g->n * 8 + i) % 256] = s->entropy[i];
    }
    g->n++;
}

static void test_device_path(const tb_dgemma_model *m)
{
    const tb_dgemma_config *c = &m->cfg;
    int C = c->canvas, V = c->vocab;
    char err[256];
    tb_dgemma_state st;
    CHECK(tb_dgemma_state_init(&st, m, 64, C, err, sizeof err) == 0);
    dev_emu d = {&st, C, V, 0, malloc((size_t)C * V * sizeof(float)), malloc((size_t)C * V * sizeof(float)),
                 calloc((size_t)3 * C, sizeof(int32_t)), malloc((size_t)C), malloc((size_t)C * sizeof(int))};
    CHECK(d.z && d.q && d.scratch && d.acc && d.order);
    tb_dg_engine host = tb_dg_cpu_engine(&st);
    tb_dg_engine dev = {.ctx = &d, .vocab = V, .canvas = C, .encode = emu_encode, .denoise_decide = emu_denoise_decide};
    tb_dg_params p;
    tb_dg_params_default(&p);
    p.max_steps = 6, p.max_new_tokens = 3 * C, p.n_eos = 0;
    int32_t prompt[9] = {2, 10, 11, 12, 13, 14, 15, 16, 17}, oa[64], ob[64];
    int na = 0, nb = 0;
    tb_dg_stats sa, sb;
    step_log la = {0}, lb = {0};
    tb_dg_hooks ha = {.ctx = &la, .on_step = log_step}, hb = {.ctx = &lb, .on_step = log_step};
    tb_dgemma_reset(&st);
    CHECK(tb_dg_generate(&host, &p, prompt, 9, 99, NULL, &ha, oa, &na, &sa, err, sizeof err) == 0);
    tb_dgemma_reset(&st);
    CHECK(tb_dg_generate(&dev, &p, prompt, 9, 99, NULL, &hb, ob, &nb, &sb, err, sizeof err) == 0);
    CHECK(d.calls == sb.steps && sb.steps > 3); /* the device path ran, and past a canvas */
    CHECK(na == nb && memcmp(oa, ob, (size_t)na * sizeof *oa) == 0);
    CHECK(sa.steps == sb.steps && sa.canvases == sb.canvases && sa.encodes == sb.encodes);
    CHECK(la.n == lb.n && memcmp(la.ids, lb.ids, sizeof la.ids) == 0 && memcmp(la.ent, lb.ent, sizeof la.ent) == 0);
    tb_dgemma_state_free(&st);
    free(d.z), free(d.q), free(d.scratch), free(d.acc), free(d.order);
}

/* The CPU binding end to end on the tiny preset: runs, deterministic. */
static void test_cpu_generate(const tb_dgemma_model *m)
{
    tb_dgemma_state s;
    char err[256], why[256];
    CHECK(tb_dgemma_state_init(&s, m, 64, 8, err, sizeof err) == 0);
    tb_dg_engine e = tb_dg_cpu_engine(&s);
    tb_dg_params p;
    tb_dg_params_default(&p);
    p.max_new_tokens = 16, p.max_steps = 6;
    int32_t prompt[10] = {5, 6, 7, 8, 9, 10, 11, 12, 13, 14}, a[16], b[16];
    int n;
    tb_dg_stats st;
    CHECK(tb_dg_generate(&e, &p, prompt, 10, 3, NULL, NULL, a, &n, &st, why, sizeof why) == 0);
    CHECK(n == 16 && s.len == 10 + 8);
    tb_dgemma_reset(&s);
    CHECK(tb_dg_generate(&e, &p, prompt, 10, 3, NULL, NULL, b, &n, &st, why, sizeof why) == 0);
    CHECK(memcmp(a, b, sizeof a) == 0);
    tb_dgemma_state_free(&s);
}

int main(void)
{
    test_config();
    tb_dgemma_model m;
    char err[256];
    CHECK(tb_dgemma_preset("tiny-diffusiongemma", 5, &m, err, sizeof err) == 0);
    test_loader(&m);
    test_forward(&m);
    test_routes();
    test_schedule();
    test_accept();
    test_decide();
    test_rng();
    test_generate();
    test_cpu_generate(&m);
    test_device_path(&m);
    tb_dgemma_free(&m);
    return check_done();
}
