"""The component package's plugin: Pulumi's Python language host runs `python <this folder> <engine address>` in
the plugin's virtual environment (requirements.txt installs `rabbitmq_retry` there). Not the SDK's own
`python -m pulumi.run.plugin`: its provider drops input keys the schema lacks, ours refuses them
(`rabbitmq_retry.pulumi.plugin_host`)."""

import sys

from rabbitmq_retry.pulumi.plugin_host import serve

serve(sys.argv[1:])
