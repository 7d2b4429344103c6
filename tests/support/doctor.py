"""What a parsed stack config declares, recorded from its Vhost components under mocks, for the doctor's tests that
start from a `StackConfig` instead of a stack file (`make doctor` itself reads its evaluation's recording)."""

from __future__ import annotations

from typing import cast

from components import Vhost, VhostPythonArgs
from components.model import naming
from components.model.naming import vhost_key
from components.model.stack_config import StackConfig
from components.pulumi.resources import ShovelAccess
from tools.lib.mockrun import Registered, record


def planned_objects(config: StackConfig) -> list[Registered]:
    """The queues, exchanges, bindings and policies the stack declares, recorded from its Vhost components
    under mocks (passwords do not matter here: users are not compared; nor do the shovels' URIs, so a vhost whose
    migrations move queues gets a stand-in shovel user)."""
    access = ShovelAccess(naming.SHOVEL_USER, "unused")

    def program() -> None:
        for index, vhost in enumerate(config.vhosts):
            # A parsed vhost is taken at run time; the typed args (VhostPythonArgs) say the stack file's shape.
            args = {"vhost": vhost, "config_path": f"vhosts[{index}]",
                    "passwords": {user: "unused" for user, _ in vhost.user_paths()}, "shovel_access": access}
            Vhost(vhost_key(vhost.name), cast(VhostPythonArgs, args))
    return record(program)
