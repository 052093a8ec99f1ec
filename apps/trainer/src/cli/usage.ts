/** `webshard-train --help`. */
export const USAGE = `Usage: webshard-train [options]

Trains a GPT (nanoGPT's model and key names) or a small MLP on the CPU or WebGPU, in one process
or on --world-size ranks with DDP or FSDP.
Relative paths are read against the directory you ran the command in.

Model
  --model <gpt|mlp>            gpt (default) or a two-layer MLP on seeded synthetic data
  --n-layer <n> --n-head <n> --n-embd <n> --block-size <n>
                               GPT shape (default 2, 4, 64, 32); --n-embd is the MLP's hidden width
  --vocab-size <n>             default: the data's (at least that)
  --init <file.safetensors>    initial weights by PyTorch names (the tied weight may be stored
                               once, as transformer.wte.weight), or a transformers GPT-2
                               checkpoint (Conv1D layout); default: nanoGPT's seeded init
  --seed <n>                   initialization and sampling seed, 0 included (default 1337)
Data
  --data <file>                a .bin of uint16 tokens (nanoGPT's format), or any other file as
                               UTF-8 characters (bytes when it is not UTF-8); default: the sonnets
  --tokenizer <char|gpt2>      char (default): a text's characters are its tokens; gpt2: GPT-2's
                               BPE (50257 tokens; pad with --vocab-size 50304 as nanoGPT), and a
                               .bin's tokens are GPT-2's (nanoGPT's prepare.py), decoded in samples
  --batch-size <n>             global sequences per step (default 16)
  --grad-accum <k>             micro-batches per step (default 1); the batch must divide by it
Optimizer
  --steps <n>                  optimizer steps (default 200)
  --lr <x> --beta1 <x> --beta2 <x> --eps <x> --weight-decay <x>
                               AdamW (default 3e-3, 0.9, 0.95, 1e-8, 0.1; decay on tensors of 2 or
                               more dimensions only)
  --grad-clip <x>              clip the global gradient norm (default 1; 0 for none)
  --lr-schedule <constant|cosine>  default constant; cosine: linear warm-up, decay to lr/10
  --warmup-steps <n>           warm-up steps of the cosine schedule (default 0)
Execution
  --strategy <single|ddp|fsdp|offload|diloco>  default single; ddp: every rank holds the model and
                               gradients are all-reduced in buckets; fsdp: parameters, gradients and
                               optimizer state sharded over the ranks; offload: the model lives on
                               the host and streams through the device slice by slice; diloco: each
                               rank steps its own replica, averaged every --inner-steps steps
  --capture-step               record the step once and replay it (CUDA Graphs' way): same bits,
                               less time outside kernels; single, one micro-batch, fp32 (the
                               default there, unless --memory-limit; an error elsewhere)
  --no-capture-step            run every step eagerly
  --world-size <n>             ranks sharing each batch (default 1; the batch must divide by it)
  --transport <local|shm|tcp|ws>  how ranks run: local (one thread), shm (worker threads, the
                               default), tcp or ws (processes, started through webshard-run)
  --browser-ranks <k>          ddp, fsdp over ws: the last k ranks are browser tabs; prints the
                               page to open in each, and waits for them (default 0)
  --browser-port <port>        where that page is served (default: a free port)
  --browser-host <address>     the address tabs reach this machine at: the page, the store and
                               the Node ranks listen there (default 127.0.0.1: tabs on this
                               machine only; another address lets other machines join, with the
                               token; set WEBSHARD_TLS_CERT and WEBSHARD_TLS_KEY for https/wss)
  --elastic-coordinator <port> host an elastic world's coordinator (0: a free port, printed);
                               it runs until every member left, or exits 1 when the world stays
                               below --min-world-size for --elastic-wait-seconds
  --min-world-size <n> --max-world-size <n>  the coordinator's bounds (default 1 and 64)
  --elastic-wait-seconds <n>   below the minimum, and for more members at the start (default 60)
  --member-timeout <s>         the coordinator drops a member silent this long: frozen, asleep,
                               cut off (default 60; a slow step is fine, a frozen process is not)
  --sync-timeout <s>           at a sync point (diloco: an outer sync), how long the members wait
                               for late ones before going on without them (default 300)
  --coordinator-state <file>   the coordinator keeps its world there: started again with it, it
                               takes the world back (without it, from what the members report)
  --coordinator-timeout <s>    --elastic: how long a member trains on without its coordinator
                               (it reconnects meanwhile) before it exits (default 300)
                               with --browser-port the coordinator also serves the page that joins
                               a browser tab as a member (ddp or diloco), training with its own flags
  --elastic <ws://host:port>   ddp or fsdp (fp32) as one member of that elastic world: members may
                               leave (the others drop them at the next step) and join (ddp: they
                               receive rank 0's state; fsdp: every member restarts from the last
                               --checkpoint-dir checkpoint); the batch must divide by every world size
  --tls-cert <file> --tls-key <file>  PEM: --elastic-coordinator serves its page over https and
                               itself and its stores over wss (the URL it prints is wss://); an
                               --elastic member serves its ws listener over wss (tabs dial it)
  --tls-ca <file>              --elastic: trust this CA (a private or self-signed certificate)
  --no-listen                  --elastic over ws: open no listening socket (behind a home NAT):
                               this member dials the members that listen, and a member that listens
                               relays its traffic with the others that do not
  --bucket-mb <x>              ddp: gradient bucket size; fsdp: reduce-scatter bucket (MiB)
  --ddp-allreduce <mode>       ddp: auto|overlap|delay, all-reduce during or after backward (auto: timed)
  --reshard-after-forward <true|false>  fsdp: free full parameters after forward (default true)
  --sharding <full|grad-op|hybrid|none>  fsdp: PyTorch's FULL_SHARD (default), SHARD_GRAD_OP
                               (full parameters kept from forward to backward), HYBRID_SHARD (shard
                               inside a node, replicate across nodes: for several machines, with
                               webshard-run --nnodes) or NO_SHARD (replicated, as ddp)
  --auto-wrap <block|none>     fsdp: one unit per transformer block (default) or the root only
  --prefetch <n>               fsdp: gather up to n units ahead of the one computing (default 1,
                               0: none): a rank may run n units ahead before a gather waits, for
                               n - 1 more units' full parameters
  --move-params-to-cpu         fsdp: shards and optimizer on the CPU, compute on --backend
  --num-slices <n>             offload: slices the model streams in (default 3)
  --num-microbatches <n>       offload: batch chunks per slice visit (default 1)
  --checkpoint-activation      offload: recompute each slice in backward from its input
  --inner-steps <n>            diloco: inner AdamW steps between outer syncs (default 50)
  --outer-lr <x> --outer-momentum <x>
                               diloco: outer Nesterov SGD (default 0.7, 0.9: the paper's;
                               with topk 1, 0: SparseLoCo's, its error feedback is the momentum)
  --outer-compression <f32|bf16|int8|int4|topk>  diloco: how pseudo-gradients travel (default
                               f32; int8 and int4 with a scale per 256 elements and error
                               feedback; topk: SparseLoCo's top-k of each tensor's 64 x 64
                               tiles, 2-bit values)
  --outer-density <x>          diloco topk: share of each tile sent, in (0, 1] (default 0.0234375)
  --outer-levels <tile|tensor> diloco topk: 2-bit levels per tile (default) or per tensor
                               (SparseLoCo's 4 bins over 6 standard deviations)
  --outer-error-decay <x>      diloco: e = x e + delta for the error feedback, in [0, 1]
                               (default: topk 0.8, measured; bf16, int8, int4 1)
  --outer-fragments <F>        diloco: Streaming DiLoCo, the parameter tensors dealt into F
                               fragments (strided), one synced every --inner-steps / F steps
                               (default 1: all at once)
  --outer-overlap <tau>        diloco: inner steps a fragment's sync runs behind before it
                               lands, at most --inner-steps / F (default 0: wait for it)
  --outer-merge <mix|carry>    diloco: how a fragment landed after an overlap meets the local
                               parameters: mix (alpha x local + (1 - alpha) x global) or carry
                               (the new global plus the steps since its issue; default topk's)
  --outer-mixing <alpha>       diloco, --outer-merge mix: a landed fragment keeps alpha of its
                               local parameters (default 0.5 with an overlap, the paper's; 0
                               without)
  --comm-progress <thread|worker>  tcp/ws process ranks: run the transport (and WEBSHARD_LINK's
                               shaper) on a worker thread, so syncs move while kernels run
                               (default worker for streamed diloco, else thread)
  --precision <fp32|fp16|bf16> compute precision (16 bits keep f32 masters; default fp32)
  --backend <auto|cpu|webgpu>  default auto: whichever trains this model faster in a short probe
  --memory-limit <bytes>       emulated device memory (the caching allocator's limit)
  --matmul-fma <auto|off>      CPU matmul with fused multiply-add where every rank fuses (default auto)
  --max-seconds <n>            stop after the step that passes n seconds (default 0: no limit;
                               a job: by rank 0's clock, every rank a step later)
Output
  --log-jsonl <file>           one JSON line per step: step, loss, lr, tokensPerSecond, peakDeviceBytes, peakExternalBytes, peakHostBytes
  --save <file.safetensors>    the final state dict under PyTorch names
  --samples <file>             the final sample's text
  --report <file.html>         one self-contained page: loss curves, tokens/s, peak memory
  --checkpoint-every <n> --checkpoint-dir <dir>
                               a checkpoint every n steps (fsdp: sharded, loads at any world size)
  --resume <dir>               continue a run from its checkpoint (dir/latest, or a step directory)
  --overwrite-checkpoints      let --checkpoint-dir replace another run's checkpoints there
  --eval-every <n>             held-out loss and a short sample every n steps (default 0: at the end only)
  --sample-length <n>          tokens sampled at the end (default 200; 0 for none)
  --help                       this text
`;
