"""The session's start and end: read what the client can do and the settings at initialize,
follow configuration changes, and end every worker at shutdown."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from lsprotocol import types

from agents import __version__
from server.client_features import ClientFeatures
from server.jobs import JobManager
from server.settings import SECTION, load

if TYPE_CHECKING:
    from server.language_server import KernelAgentServer


def register(ls: KernelAgentServer) -> None:
    @ls.feature(types.INITIALIZE)
    def initialize(params: types.InitializeParams) -> None:
        state = ls.state
        state.client = ClientFeatures.of(params.capabilities, params.client_info)
        options = params.initialization_options
        state.init_options = options if isinstance(options, dict) else None
        loaded = load(state.init_options, trust_keys=True)
        state.settings = loaded.settings
        ls.jobs = JobManager(max_concurrent=loaded.settings.max_jobs)
        for hook in ls.initialize_hooks:  # features that depend on the client's capabilities
            hook()

    @ls.feature(types.INITIALIZED)
    async def initialized(params: types.InitializedParams) -> None:
        client = ls.state.client
        ls.log_line(
            f"kernel-agent {__version__} serving {client.name}: progress={client.progress} "
            f"pullDiagnostics={client.pull_diagnostics} annotations={client.annotations} "
            f"lensRefresh={client.lens_refresh} encoding={ls.encoding}"
        )
        if client.dynamic_configuration:
            with contextlib.suppress(Exception):
                await ls.client_register_capability_async(
                    types.RegistrationParams(
                        registrations=[
                            types.Registration(
                                id="kernel-agent-configuration",
                                method=types.WORKSPACE_DID_CHANGE_CONFIGURATION,
                                register_options={"section": SECTION},
                            )
                        ]
                    )
                )
        await ls.reload_settings()

    @ls.feature(types.SHUTDOWN)
    async def shutdown(params: Any = None) -> None:
        ls.log_line("shutting down: ending every worker")
        await ls.jobs.shutdown()
        ls.close_memory()

    @ls.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    async def did_change_configuration(params: types.DidChangeConfigurationParams) -> None:
        pushed = params.settings if isinstance(params.settings, dict) and params.settings else None
        if pushed is not None and SECTION not in pushed and ls.state.client.configuration:
            pushed = None  # a bare "something changed": ask for our section
        await ls.reload_settings(pushed)
