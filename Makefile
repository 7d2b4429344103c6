# Every target works on a fresh Debian machine after `make setup`; see README.md and docs/.
STACK ?= dev
BASE ?= HEAD
PY := .venv/bin/python
# The dev stack's local broker; other stacks take RABBITMQ_* from the environment.
PULUMI_ENV := PULUMI_BACKEND_URL=$${PULUMI_BACKEND_URL:-file://$(CURDIR)/.pulumi-state} \
	PULUMI_CONFIG_PASSPHRASE=$${PULUMI_CONFIG_PASSPHRASE-} \
	$(if $(filter dev,$(STACK)),RABBITMQ_USERNAME=$${RABBITMQ_USERNAME:-guest} RABBITMQ_PASSWORD=$${RABBITMQ_PASSWORD:-guest})

# make exits 2 whenever a recipe fails, so a tool's own status (1: error, else the one its caller names: 2 by
# default, for unacknowledged data loss) cannot be make's; the recipe names it in one last line instead.
# $(call tool_status,<module>[,<status>,<meaning>]); `python -m tools.…` exits with the same status.
tool_status = || { status=$$?; case $$status in 1) why=error;; \
	$(or $(2),2)) why="$(or $(3),data loss not acknowledged)";; *) why=failed;; esac; \
	echo "make $@: $(1) exit status $$status ($$why); make itself exits 2 on any failure" >&2; \
	exit $$status; }

.PHONY: setup test test-fast lint plan evaluate preview up brokers review mutate adopt drift contracts definitions doctor bench \
	migrate-status migrate-retire alerts

setup:
	scripts/setup.sh

test: lint
	scripts/brokers.sh ensure all
	scripts/clusters.sh ensure all
	scripts/prometheus.sh start
	scripts/test.sh

test-fast:
	$(PY) -m pytest -m "not broker"

# mypy checks the packages listed in pyproject.toml's [tool.mypy] files.
lint:
	$(PY) -m ruff check .
	$(PY) -m mypy

# FORMAT=json: docs/schemas/plan.schema.json.
plan:
	@$(PY) -m tools.plan_report --stack $(STACK)$(if $(FORMAT), --format $(FORMAT)) $(call tool_status,tools.plan_report)

# The stack's evaluation by these tools as a versioned JSON document (docs/schemas/evaluation.schema.json): save it
# when the stack is deployed, and `make review BASE_EVALUATION=<file>` reviews a change against it.
evaluate:
	@$(PY) -m tools.evaluate --stack $(STACK)$(if $(OUTPUT), --output $(OUTPUT)) $(call tool_status,tools.evaluate)

# The stack's retry contracts as `pulumi stack output retry_contracts --json` prints them, without the CLI.
contracts:
	@$(PY) -m tools.contracts --stack $(STACK) --output $(or $(OUTPUT),contracts.$(STACK).json) \
		$(call tool_status,tools.contracts)

# The stack's topology as RabbitMQ definitions, for `rabbitmqctl import_definitions` (adds only; no CLI needed).
definitions:
	@$(PY) -m tools.definitions --stack $(STACK) --output $(or $(OUTPUT),definitions.$(STACK).json) \
		$(call tool_status,tools.definitions)

# The stack's Prometheus alerting rules (docs/alerts.md): FORMAT=prometheus (a rule file, the default) or
# prometheus-rule (a Kubernetes PrometheusRule); OUTPUT=file, else alerts.<stack>.yml.
alerts:
	@$(PY) -m tools.alerts --stack $(STACK) --format $(or $(FORMAT),prometheus) \
		--output $(or $(OUTPUT),alerts.$(STACK).yml) $(call tool_status,tools.alerts)

brokers:
	scripts/brokers.sh status
	scripts/clusters.sh status

# Benchmarks on both local brokers and broker-free plan cost (BENCH_QUICK=1: a short smoke run, written to
# bench/results/quick/); results and plots in bench/results/, durations and figures in bench/README.md.
bench:
	scripts/brokers.sh ensure all
	scripts/prometheus.sh start
	$(PY) -m bench

# The CLI: your own when it is on PATH, else the one `make setup` built (scripts/engine.sh), which never downloads a
# plugin; the program's venv first, since the built Python language host runs the `python` it finds (docs/engine.md).
ENGINE_ENV := PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION=$$(command -v pulumi >/dev/null && echo false || echo true) \
	PATH=$(CURDIR)/.venv/bin:$$PATH:$(CURDIR)/.tools/engine/bin PULUMI_SKIP_UPDATE_CHECK=true

preview:
	mkdir -p .pulumi-state && export $(PULUMI_ENV) $(ENGINE_ENV) && $(if $(filter dev,$(STACK)),pulumi stack select --create dev && )pulumi preview --stack $(STACK) --diff

up:
	mkdir -p .pulumi-state && export $(PULUMI_ENV) $(ENGINE_ENV) && $(if $(filter dev,$(STACK)),pulumi stack select --create dev && )pulumi up --stack $(STACK)

# BASE: any commit or tag of this repository (its own program, run by these tools), or BASE_EVALUATION=<file> (a
# saved `make evaluate`). FORMAT=json: docs/schemas/review.schema.json. ENDPOINT=http://host:15672: also what each
# deleted or replaced queue holds now (read-only, credentials as drift's).
review:
	@$(PULUMI_ENV) $(PY) -m tools.review $(if $(BASE_EVALUATION),--base-evaluation $(BASE_EVALUATION),--base $(BASE)) \
		--stack $(STACK)$(if $(OUTPUT), --output $(OUTPUT))$(if $(OUTPUT_FULL), --output-full $(OUTPUT_FULL))$(if \
		$(FORMAT), --format $(FORMAT))$(if $(ENDPOINT), --endpoint $(ENDPOINT)) $(call tool_status,tools.review)

mutate:
	$(PY) -m tools.mutate

# Read-only: GET requests to ENDPOINT (else RABBITMQ_ENDPOINT) with RABBITMQ_USERNAME/RABBITMQ_PASSWORD, or a file.
adopt:
	@$(PY) -m tools.adopt --vhost "$(VHOST)" --stack $(STACK)$(if $(ENDPOINT), --endpoint $(ENDPOINT))\
		$(if $(DEFINITIONS), --definitions $(DEFINITIONS))$(if $(CONTRACTS), --contracts $(CONTRACTS))\
		$(if $(SUFFIX), --suffix $(SUFFIX)) $(call tool_status,tools.adopt)

# Where each migration of the stack file stands on the live broker and the next step; read-only, credentials as drift's.
migrate-status:
	@$(PULUMI_ENV) $(PY) -m tools.migrate_status --stack $(STACK)$(if $(ENDPOINT), --endpoint $(ENDPOINT)) \
		$(call tool_status,tools.migrate_status)

# 0 in sync, 2 drift, 1 error (python -m tools.drift); through make any failure is 2, named in the last line.
drift:
	@$(PULUMI_ENV) $(PY) -m tools.drift --stack $(STACK)$(if $(ENDPOINT), --endpoint $(ENDPOINT))\
		$(if $(DEFINITIONS), --definitions $(DEFINITIONS))$(if $(OUTPUT), --output $(OUTPUT))$(if \
		$(FORMAT), --format $(FORMAT)) $(call tool_status,tools.drift,2,drift)

# Read-only: can the live broker (ENDPOINT, else RABBITMQ_ENDPOINT, else the stack's rabbitmq:endpoint) run the stack?
# 0 nothing blocking, 2 blocking findings, 1 error (python -m tools.doctor); make names the status in its last line.
doctor:
	@$(PULUMI_ENV) $(PY) -m tools.doctor --stack $(STACK)$(if $(ENDPOINT), --endpoint $(ENDPOINT)) \
		$(call tool_status,tools.doctor,2,blocking findings)

# An external move's old objects (move.external): read-only unless APPLY=1. 0 nothing refused, 3 stopped at a
# refusal (nothing lost; run it again later), 1 error (python -m tools.migrate_retire).
migrate-retire:
	@$(PULUMI_ENV) $(PY) -m tools.migrate_retire --stack $(STACK) --migration "$(MIGRATION)"$(if $(ENDPOINT), \
		--endpoint $(ENDPOINT))$(if $(APPLY), --apply) \
		$(call tool_status,tools.migrate_retire,3,stopped at a refusal)
