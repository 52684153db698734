"""LM Studio: the desktop app (an Electron program) and its headless daemon ``llmster``, each
serving the same HTTP API (OpenAI-compatible ``/v1``, its own ``/api/v0`` and ``/api/v1``) from
inside the one process, once the server is switched on in the app or with ``lms server start``.

LM Studio itself is closed source. Facts below come from its public clients, the ``lms`` CLI
(lmstudio-ai/lms ``07b7252d``, v0.3.43) and the JS SDK (lmstudio-ai/lmstudio-js ``6ec11db1``),
from its published docs (lmstudio-ai/docs, commits named beside each fact), and from public issues
showing its processes; each line says which.
"""

from __future__ import annotations

from enginespec.definition.records import HealthRule, IdentityProbe, Launch, Serving, Settings
from enginespec.definition.servedrecords import ControlRequest, ModelControl, ModelList
from enginespec.definition.signature import LaunchForm, Signature
from enginespec.engines import llamacpp, mlx
from enginespec.failures import Failures
from enginespec.spec import EngineSpec

SIGNATURE = Signature(
    engine="lmstudio",
    launch_forms=(
        # The app. Linux: the AppImage's `lm-studio` (`/tmp/.mount_lmstuXXXX/lm-studio`, started by
        # `lms` as `lm-studio --run-as-service`: lmstudio-ai/lmstudio-bug-tracker#1068's spawnargs,
        # and lmstudio-js packages/lms-common-server/src/findOrStartLlmster.ts
        # wakeUpServiceFromLocation, which adds `--run-as-service` for the app, nothing for the
        # daemon), or `./lm-studio --no-sandbox --headless` in an extracted AppImage
        # (sterlenjohnson/Headless-LMStudio-Server); the AppImage file itself run directly
        # (`./LM_Studio.AppImage`, skillrepos/diy-gen-ai startLMStudio.sh). Windows' `LM Studio.exe`
        # and macOS's `LM Studio` have a space in their name, which a launch form cannot name.
        LaunchForm(executables=("lm-studio", "LM_Studio.AppImage")),
        # The headless daemon: `~/.lmstudio/llmster/<version>/llmster`, started with no arguments
        # (`lms daemon up` spawns the `path` of .internal/llmster-install-location.json with its
        # `argv`, `[]` as LM Studio writes it: lmstudio-js findOrStartLlmster.ts; the install file
        # in opj161/comfyui-lmstudio's docs and lmstudio-ai/lms#502's process tree `llmster`).
        LaunchForm(executables=("llmster",)),
    ),
    # Electron's helpers run the app's own executable with `--type=renderer|gpu-process|utility|
    # zygote|broker` (Chromium's switches::kProcessType; `lm-studio --type=broker` in
    # lmstudio-bug-tracker#588): never the server. They, the `llmworker.js` node processes that
    # hold the models (`~/.lmstudio/.internal/utils/node ... llmster/0.0.6-1/.bundle/lib/
    # llmworker.js`, children of llmster: lms#502; of the app: lmstudio-bug-tracker#588, #940)
    # and every other descendant fold into the app or daemon as its workers.
    exit_flags=frozenset({"--type"}),
    fold_workers=True,
    # argv never names the address: LM Studio keeps it in .internal/http-server-config.json of
    # its home (see Settings below). DEFAULT_SERVER_PORT = 1234 (lms src/createClient.ts); the
    # server binds 127.0.0.1 unless told otherwise (lms src/subcommands/server.ts `--bind`,
    # "127.0.0.1 (default) for localhost only").
    default_host="127.0.0.1",
    default_port=1234,
)


SPEC = EngineSpec(
    id="lmstudio",
    aliases=("lm-studio", "llmster"),
    signature=SIGNATURE,
    # Not installed by enginespec: a desktop download, or the llmster install script; its CLI
    # `lms server start` switches the server on (lms src/subcommands/server.ts).
    launch=Launch(kind="binary", executable="lms", args=("server", "start")),
    # Why a load failed: LM Studio's runtimes are llama.cpp (its llama.cpp engines print llama.cpp's
    # own loader messages, `error loading model: ...`) and mlx-lm/mlx-vlm (lmstudio-ai/mlx-engine
    # calls mlx_lm.utils.load, whose `Model type X not supported.` it passes on); LM Studio's own
    # dialog lines (`Failed to load the model`, `Error loading model.`, seen in
    # lmstudio-ai/lmstudio-bug-tracker#297 and lms#136) only wrap them.
    failures=Failures(wrappers=(r"^(?:🥲 )?Failed to load the model$", r"^Error loading model\.$"))
    + llamacpp.FAILURES
    + mlx.FAILURES,
    serving=Serving(
        # `GET /lmstudio-greeting` answers 200 `{"lmstudio": true}` on the server's port: what `lms`
        # checks the server by (lms src/createClient.ts checkHttpServer: `json?.lmstudio !== true`
        # is "Not an LM Studio server"), and the SDK likewise (lmstudio-js
        # packages/lms-client/src/LMStudioClient.ts isLocalhostWithGivenPortLMStudioServer).
        # Models load on request (JIT) or by `lms load`: a server that answers is ready.
        health_path="/lmstudio-greeting",
        health_rules=(
            HealthRule(status=200, field="lmstudio", flag=True, state="ready"),
            HealthRule(status=200, state="unknown", reason="not LM Studio's greeting"),
        ),
        # mistral.rs also defaults to 1234: only LM Studio answers its greeting so.
        identity=IdentityProbe(path="/lmstudio-greeting", status=200, field="lmstudio", flag=True),
    ),
    # What it has downloaded and what is loaded. `GET /api/v1/models` (LM Studio 0.4.0 on: the v1
    # REST API, lmstudio-ai/docs 1_developer/api-changelog.md @ 3253cd8f) lists every model
    # downloaded, `{"models": [{"type", "key", "loaded_instances": [{"id", "config"}], ...}]}`
    # (1_developer/2_rest/list.md @ 35ec6d3d); an older release answers 404 there and lists
    # `{"data": [{"id", "type", "state": "loaded"|"not-loaded"}]}` at `/api/v0/models` (0.3.6
    # on; 1_developer/2_rest-api/endpoints.md @ 8ec2b227, deprecated).
    models=ModelList(kind="lmstudio", path="/api/v1/models", older_path="/api/v0/models"),
    # `POST /api/v1/models/load {"model": KEY}` loads it (its answer `{"model_instance_id",
    # "config", "load_time_seconds"}` once loaded: 1_developer/2_rest/load.md @ 35ec6d3d) and
    # `POST /api/v1/models/unload {"instance_id": ID}` unloads one loaded instance
    # (1_developer/2_rest/unload.md @ 15ed6982): the id the model list shows it under. 0.4.0
    # on (the changelog: "Model download and load endpoints"); an older release has neither.
    control=ModelControl(
        load=ControlRequest(path="/api/v1/models/load", body={"model": "{model}"}),
        unload=ControlRequest(path="/api/v1/models/unload", body={"instance_id": "{model}"}),
    ),
    # `lms server start` starts the server on `--port`, else the port of
    # .internal/http-server-config.json, else 1234, and `lms server status|stop` read the same
    # file's `port` and `networkInterface` (lms src/subcommands/server.ts getServerConfig:
    # `{port: number, networkInterface: string}`, JSON). The file is under LM Studio's home:
    # `.lmstudio` in the user's home, or the directory `~/.lmstudio-home-pointer` holds
    # (lmstudio-js packages/lms-common-server/src/findLMStudioHome.ts; lms src/lmstudioPaths.ts
    # serverConfigPath).
    settings=Settings(
        config_format="json",
        home_config=".lmstudio/.internal/http-server-config.json",
        home_pointer=(".lmstudio-home-pointer", ".lmstudio"),
        config_keys={"port": "port", "networkInterface": "host"},
    ),
)
