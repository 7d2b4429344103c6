"""Reading the stack config into the model: the Pulumi stack file and the runtime's values, each entity by its
parser (`parsers`, `migrations`), the checks across entities (`crosschecks`), the passwords, what a broker version
can run (`capabilities`), the topology put together (`load`) and everything a stack says (`stack_settings`); a
refused config is one `ConfigError` listing every problem with its key path (`model/problems.py`)."""
